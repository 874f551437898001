package dlock

import (
	"encoding/json"
	"os"
)

// Holder describes who holds a lock. It is stored with the lock when it is
// taken, so operators can see it with Inspect or `dlock inspect`.
type Holder struct {
	Host   string `json:"host,omitempty"`   // os.Hostname of the holder
	PID    int    `json:"pid,omitempty"`    // its process id
	Client string `json:"client,omitempty"` // WithClientName
	Data   string `json:"data,omitempty"`   // WithMetadata
}

// holderPrefix is the JSON of the Client's fixed holder fields without the
// closing brace (PID is never empty, so it has one field at least), built
// once so an acquire only appends the lock's own data.
func holderPrefix(name string) string {
	host, _ := os.Hostname()
	b, _ := json.Marshal(Holder{Host: host, PID: os.Getpid(), Client: name})
	return string(b[:len(b)-1])
}

// metadata returns the holder JSON for one acquisition.
func (c *Client) metadata(data string) string {
	if data == "" {
		return c.holderJSON
	}
	q, _ := json.Marshal(data)
	return c.holder + `,"data":` + string(q) + "}"
}
