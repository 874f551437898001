package dlock

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// SemaphoreInfo is what Semaphore.Inspect and RWMutex.Inspect read.
type SemaphoreInfo struct {
	Key      string        `json:"key"`      // the semaphore's name
	Kind     string        `json:"kind"`     // "semaphore" or "rwmutex"
	Capacity int64         `json:"capacity"` // the holders' (see Semaphore.Inspect)
	InUse    int64         `json:"in_use"`   // the permits the holders hold
	Holders  []PermitsInfo `json:"holders"`  // oldest grant (smallest fence) first
	Waiters  int64         `json:"waiters"`  // queued waiters whose entries have not expired
}

// PermitsInfo is one holder's permits, as Inspect reads them.
type PermitsInfo struct {
	Owner   string        `json:"owner"`   // the holder's token (Lock.Token)
	Permits int64         `json:"permits"` // how many it holds; an RWMutex's writer holds MaxPermits
	Fence   uint64        `json:"fence"`   // its grant's fence
	TTL     time.Duration `json:"ttl_ns"`  // remaining lease
	Holder  Holder        `json:"holder"`  // who took them
}

// Inspect reads the semaphore's holders and queue for operators, in one
// script, without changing anything. Holders whose lease ran out are left
// out. Capacity is the one the holders were granted under, which may
// differ from s's (Acquire with s then fails); s's when nobody holds
// permits. Like Available, it needs a single deployment: on a Client made
// by redlock.New it returns an error wrapping errors.ErrUnsupported.
//
// Other data than a semaphore's at its name is an error wrapping
// ErrWrongType, with a nil SemaphoreInfo. Other data at the name its
// waiters are kept under is one too, but the holders are still read and
// returned with it (Waiters 0), for an operator to see and ForceRelease.
func (s *Semaphore) Inspect(ctx context.Context) (*SemaphoreInfo, error) {
	n, k, err := s.admin()
	if err != nil {
		return nil, err
	}
	// Twice is as once: it only reads.
	v, err := followFailover(ctx, n.rdb, k.lock, func() *redis.Cmd {
		return permitsInspectScript.Run(ctx, n.rdb, k.all())
	}).Slice()
	if err == nil && (len(v)-1)%6 != 0 {
		err = fmt.Errorf("inspect script replied %v", v)
	}
	if err != nil {
		return nil, redisError(s.kind+" inspect", s.name, err)
	}
	info := &SemaphoreInfo{Key: s.name, Kind: s.kind, Capacity: s.capacity, Holders: []PermitsInfo{}}
	info.Waiters, _ = v[0].(int64)
	for i := 1; i+5 < len(v); i += 6 {
		var h PermitsInfo
		h.Owner, _ = v[i].(string)
		ttl, _ := v[i+1].(int64)
		h.TTL = time.Duration(ttl) * time.Millisecond
		h.Permits, _ = v[i+2].(int64)
		info.Capacity, _ = v[i+3].(int64)
		fence, _ := v[i+4].(string)
		h.Fence, _ = strconv.ParseUint(fence, 10, 64)
		meta, _ := v[i+5].(string)
		_ = json.Unmarshal([]byte(meta), &h.Holder)
		info.InUse += h.Permits
		info.Holders = append(info.Holders, h)
	}
	slices.SortFunc(info.Holders, func(a, b PermitsInfo) int { return cmp.Compare(a.Fence, b.Fence) })
	if info.Waiters < 0 {
		info.Waiters = 0
		return info, fmt.Errorf("dlock: %s inspect %q: %w: other data at its waiters name", s.kind, s.name, ErrWrongType)
	}
	return info, nil
}

// ForceRelease takes away the permits of the holder token (a
// PermitsInfo.Owner that Inspect read), for an operator clearing a stuck
// holder, and hands them to the waiters first in line as that holder's
// Unlock would. The holder is not told until its next renewal, which
// cancels its Lock's Context with ErrLockLost (one WithoutRenewal: until
// its next Extend, TTL or Unlock, or its lease's end). It returns an error
// wrapping ErrNotHeld if token holds no permits (released, lease run out,
// or never granted), ErrWrongType if other data than a semaphore's is at
// its name, ErrInvalidOption if token is not a token, and
// errors.ErrUnsupported on a Client made by redlock.New. Under
// WithReplicaAck it waits for the replicas as a release does. The token of a
// queued waiter holds nothing: it keeps its place.
func (s *Semaphore) ForceRelease(ctx context.Context, token string) error {
	if !isToken(token) {
		return fmt.Errorf("%w: owner %q is not a token", ErrInvalidOption, token)
	}
	n, k, err := s.admin()
	if err != nil {
		return err
	}
	// The release script of an Unlock: it hands the permits over too.
	cmd, got := n.runForce(ctx, k.scripts().release.script, k.all(), token, s.capacity, "holder")
	left, err := cmd.Int64()
	if err != nil {
		return redisError(s.kind+" force release", s.name, err)
	}
	if left < 0 {
		return fmt.Errorf("dlock: %s force release %q: token %s holds no permits: %w", s.kind, s.name, token, ErrNotHeld)
	}
	n.ack.short(got, ReplicaReport{Op: "force release", Key: s.name, Token: token, Kind: s.kind})
	return nil
}

// Inspect reads the lock's readers and writer and its queue, as
// Semaphore.Inspect does: a reader holds 1 permit, a writer MaxPermits.
func (m *RWMutex) Inspect(ctx context.Context) (*SemaphoreInfo, error) {
	return m.sem().Inspect(ctx)
}

// ForceRelease takes the lock away from the reader or writer token, as
// Semaphore.ForceRelease does.
func (m *RWMutex) ForceRelease(ctx context.Context, token string) error {
	return m.sem().ForceRelease(ctx, token)
}
