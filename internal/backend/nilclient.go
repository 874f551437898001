package backend

import "reflect"

// IsNil reports whether a value passed as an interface is nil, including a
// nil pointer of a concrete type (a nil *redis.Client as a
// redis.UniversalClient) and a nil function of a function type with
// methods, which are not == nil and would panic on first use.
func IsNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Func:
		return rv.IsNil()
	}
	return false
}
