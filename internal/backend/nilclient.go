package backend

import "reflect"

// IsNil reports whether a Redis client passed as an interface is nil,
// including a nil pointer of a concrete type (a nil *redis.Client as a
// redis.UniversalClient), which is not == nil and would panic on first use.
func IsNil(client any) bool {
	if client == nil {
		return true
	}
	v := reflect.ValueOf(client)
	return v.Kind() == reflect.Pointer && v.IsNil()
}
