package backend

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// PubSubHealth is the health check of a pub/sub connection's reader. A
// connection whose path died with no reset to tell (a peer gone, a
// partition that drops packets) is otherwise read for good, and every
// wake-up message sent to it is missed: each waiter then waits its full
// re-check interval.
type PubSubHealth struct {
	Idle time.Duration // the silence after which the connection is pinged
	Wait time.Duration // how long after the ping something must come
}

// DefaultPubSubHealth is the health check of the wake-up connections. A
// busy connection is never pinged, and an idle one costs a PING every 5 s.
// 5 s more for its answer: a Redis busy in a long script is seldom
// dropped for it (the waiters, woken, would only check again), and a dead
// path is found within 10 s, the waiters checking at their re-check
// interval meanwhile.
var DefaultPubSubHealth = PubSubHealth{Idle: 5 * time.Second, Wait: 5 * time.Second}

// Receive returns ps's next message as ps.Receive does. A connection
// silent for h.Idle is pinged (its PONG comes as a *redis.Pong); one still
// silent h.Wait after is dropped: Receive returns an error, and the next
// call has go-redis dial again and subscribe the channels again.
func (h PubSubHealth) Receive(ctx context.Context, ps *redis.PubSub) (any, error) {
	// Sent from another goroutine, while the read waits. A ping that fires
	// as a message arrives costs only its PONG.
	ping := time.AfterFunc(h.Idle, func() { _ = ps.Ping(ctx) })
	msg, err := ps.ReceiveTimeout(ctx, h.Idle+h.Wait)
	ping.Stop()
	var ne net.Error
	if err == nil || !errors.As(err, &ne) || !ne.Timeout() {
		return msg, err
	}
	// go-redis keeps a connection whose read ran out of the timeout it was
	// given. A read given none (a negative one) sets no deadline, so it
	// fails at once on the one that passed, and go-redis, not expecting a
	// timeout, drops the connection and dials again, under the read's
	// context. Ended here: that dial fails at once, and the caller's next
	// call dials, after its backoff. The timeout may have been a dial's
	// (no connection was read): under ctx, the same dial would be made
	// again at once.
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if late, lerr := ps.ReceiveTimeout(ended, -1); lerr == nil {
		return late, nil // a connection dialed meanwhile by another call
	}
	return nil, err
}
