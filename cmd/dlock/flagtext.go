package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
)

// flagText is the text of an error cobra found in the flags: pflag's own,
// but for a whole number it could not parse, where pflag quotes strconv's
// error (`strconv.ParseInt: parsing "99999999999999999999": value out of
// range`), which repeats the value in Go's terms. A --capacity out of
// int64's range is said as checkCapacity says one out of its own.
func flagText(err error) string {
	bad, ok := errors.AsType[*pflag.InvalidValueError](err)
	if !ok {
		return err.Error()
	}
	ne, ok := errors.AsType[*strconv.NumError](err)
	if !ok || !strings.HasPrefix(ne.Func, "ParseInt") && !strings.HasPrefix(ne.Func, "ParseUint") {
		return err.Error() // not a whole number's flag (a bool's, say)
	}
	name, value := bad.GetFlag().Name, bad.GetValue()
	switch {
	case !errors.Is(ne.Err, strconv.ErrRange):
		return fmt.Sprintf("invalid argument %q for \"--%s\" flag: not a whole number", value, name)
	case name == "capacity":
		return fmt.Sprintf("--capacity %s: %s", value, capacityRange)
	default:
		return fmt.Sprintf("--%s %s: out of range", name, value)
	}
}
