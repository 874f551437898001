package main

import (
	"net/url"
	"os"
	"regexp"
	"strings"
)

// redacted replaces secrets in everything dlock prints.
const redacted = "xxxxx"

// secrets returns the passwords that must never be printed: the URL's
// (found even if the URL does not parse) and the sentinels'. A userinfo
// without ':' is redacted too (see redact): go-redis reads it as a user
// name, but redis-cli reads redis://secret@host as the password, and
// people copy URLs from one to the other.
func (f *connFlags) secrets() []string {
	var s []string
	raw := f.rawURL()
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok && pw != "" {
			s = append(s, pw)
		}
	}
	if _, pw := splitUserinfo(raw); pw != "" {
		s = append(s, pw)
	}
	for _, m := range queryPassword.FindAllStringSubmatch(raw, -1) {
		if pw := m[2]; pw != "" {
			s = append(s, pw)
			if u, err := url.QueryUnescape(pw); err == nil && u != pw {
				s = append(s, u)
			}
		}
	}
	for _, pw := range s {
		if esc := url.QueryEscape(pw); esc != pw {
			s = append(s, esc)
		}
	}
	if pw := os.Getenv(envSentinelPassword); pw != "" {
		s = append(s, pw)
	}
	return s
}

// redact removes every secret from msg.
func (f *connFlags) redact(msg string) string {
	if raw := f.rawURL(); raw != "" {
		msg = strings.ReplaceAll(msg, raw, redactURL(raw))
	}
	for _, s := range f.secrets() {
		msg = strings.ReplaceAll(msg, s, redacted)
	}
	// A lone userinfo is also a user name, "default" for one: only where
	// it stands as a URL's userinfo, or a lock name holding it would be
	// printed as another's.
	if userinfo, _ := splitUserinfo(f.rawURL()); isLoneUserinfo(userinfo) {
		for _, u := range []string{userinfo, url.QueryEscape(userinfo)} {
			msg = strings.ReplaceAll(msg, u+"@", redacted+"@")
		}
	}
	return msg
}

// queryPassword matches a query parameter named like a password
// (?password=, &sentinel_password=) and its value: go-redis takes none,
// but other clients (redis-py, ioredis) take the password there, and
// go-redis's refusal of such a URL quotes it.
var queryPassword = regexp.MustCompile(`(?i)([?&][^=&#]*pass[^=&#]*=)([^&#]*)`)

// redactURL returns raw with its passwords replaced, also when raw is not
// a valid URL (url.Parse errors quote the URL they could not parse).
func redactURL(raw string) string {
	return queryPassword.ReplaceAllString(redactUserinfo(raw), "${1}"+redacted)
}

// redactUserinfo returns raw with the password of its userinfo replaced.
func redactUserinfo(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		if u.User != nil {
			if _, ok := u.User.Password(); !ok {
				u.User = url.User(redacted) // a lone userinfo: see redact
				return u.String()
			}
		}
		return u.Redacted()
	}
	userinfo, pw := splitUserinfo(raw)
	switch {
	case pw != "":
		user, _, _ := strings.Cut(userinfo, ":")
		return strings.Replace(raw, userinfo+"@", user+":"+redacted+"@", 1)
	case isLoneUserinfo(userinfo):
		return strings.Replace(raw, userinfo+"@", redacted+"@", 1)
	}
	return raw
}

// splitUserinfo finds "user:password" in scheme://user:password@host/...
// by hand, so it works on strings url.Parse rejects.
func splitUserinfo(raw string) (userinfo, password string) {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return "", ""
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		// A '/' may be inside the password; the userinfo ends at the last '@'.
		if at := strings.LastIndex(rest, "@"); at > i {
			i = len(rest)
		}
		rest = rest[:i]
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return "", ""
	}
	userinfo = rest[:at]
	_, password, _ = strings.Cut(userinfo, ":")
	return userinfo, password
}

// loneUserinfo reports whether the URL's userinfo has no ':', as in
// redis://secret@host: see secrets.
func (f *connFlags) loneUserinfo() bool {
	userinfo, _ := splitUserinfo(f.rawURL())
	return isLoneUserinfo(userinfo)
}

func isLoneUserinfo(userinfo string) bool {
	return userinfo != "" && !strings.Contains(userinfo, ":")
}
