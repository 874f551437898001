package backend

import "time"

// TrustedUntil returns until when a *dlock.Lock (passed as any: this
// package cannot name the type) is trusted: its watchdog's deadline, which
// the Lock's Context is cancelled at, or a little after on a loaded
// machine. Package dlock sets it. Only tests call it: the chaos tests of
// packages that see dlock from outside (redlock) need it to tell a lease
// overrun from the watchdog's scheduling lateness.
var TrustedUntil func(lock any) time.Time
