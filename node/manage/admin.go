package manage

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/auth"
	"github.com/quicmq/quicmq/node/groups"
)

// ConsumerInfo is one consumer in the admin API (GET /v1/consumers).
type ConsumerInfo struct {
	Tenant  string     `json:"tenant,omitempty"`
	Name    string     `json:"name"`
	Kind    string     `json:"kind"`              // "durable" or "group"
	Pattern string     `json:"pattern,omitempty"` // a group's; a durable's while a member is connected
	Pending uint64     `json:"pending"`           // records not acknowledged, over all its topics
	Members int        `json:"members"`           // subscription streams connected now
	LastAck *time.Time `json:"last_ack"`          // its last stored position or group state; null: none recorded
	*GroupJSON
	Topics []ConsumerTopic `json:"topics,omitempty"` // GET /v1/consumers/{name} only
}

// GroupJSON is what the admin API shows of a consumer group besides a durable's fields.
type GroupJSON struct {
	AckWait     string `json:"ack_wait"` // a Go duration: "30s"
	MaxDeliver  uint64 `json:"max_deliver"`
	DeadLetter  string `json:"dead_letter"` // "": records that reach max_deliver are dropped
	Order       string `json:"order"`       // none, topic or key
	Outstanding uint64 `json:"outstanding"` // records handed to members and not yet acknowledged
}

// ConsumerTopic is a consumer's state on one topic.
type ConsumerTopic struct {
	Topic       string     `json:"topic"`
	Resume      uint64     `json:"resume"`          // the offset it resumes at (a group: its floor)
	Floor       *uint64    `json:"floor,omitempty"` // a group's floor: every record below it is done
	Next        uint64     `json:"next"`            // the topic's head
	Pending     uint64     `json:"pending"`
	Outstanding *uint64    `json:"outstanding,omitempty"` // a group's records of it handed out and not yet acknowledged
	Updated     *time.Time `json:"updated"`
}

// Routes adds the consumer and topic endpoints to an admin API (local is the node serving
// it; region: its requests act on the whole region). The operator sees
// every tenant: ?tenant=T scopes a request to tenant T's namespace (names as T's clients
// give them), and without it names are the node's (a tenant's consumer is
// "tenant/T/NAME", its topic "T.topic"). The state-changing ones go through stateChanging (the
// node refuses them without --admin-api).
func Routes(mux *http.ServeMux, local Local, region bool, stateChanging func(http.HandlerFunc) http.HandlerFunc) {
	admin := func(h func(m *Manager, r *http.Request) (any, *wire.Error)) http.HandlerFunc {
		return adminManage(local, region, h)
	}
	mux.HandleFunc("GET /v1/consumers", admin(func(m *Manager, r *http.Request) (any, *wire.Error) {
		cs, e := m.Consumers("")
		return consumerJSON(m.A, cs, false), e
	}))
	mux.HandleFunc("GET /v1/consumers/{name}", admin(func(m *Manager, r *http.Request) (any, *wire.Error) {
		cs, e := m.Consumers(r.PathValue("name"))
		if e != nil {
			return nil, e
		}
		return consumerJSON(m.A, cs, true)[0], nil
	}))
	mux.HandleFunc("POST /v1/consumers/{name}/reset", stateChanging(admin(func(m *Manager, r *http.Request) (any, *wire.Error) {
		kind, value, err := wire.ParseStart(r.URL.Query().Get("to"))
		if err != nil {
			return nil, wire.Errorf(wire.CodeInvalidArgument, "to: %v", err)
		}
		c, e := m.Reset(r.PathValue("name"), kind, value, force(r))
		if e != nil {
			return nil, e
		}
		return consumerJSON(m.A, []Consumer{c}, true)[0], nil
	})))
	mux.HandleFunc("DELETE /v1/consumers/{name}", stateChanging(admin(func(m *Manager, r *http.Request) (any, *wire.Error) {
		removed, e := m.Remove(r.PathValue("name"), force(r))
		return map[string]int{"positions_removed": removed}, e
	})))
	mux.HandleFunc("POST /v1/topics/{topic}", stateChanging(admin(func(m *Manager, r *http.Request) (any, *wire.Error) {
		req := &wire.TopicCreate{Topic: r.PathValue("topic")}
		q := r.URL.Query()
		if q.Get("update") == "true" {
			req.Flags |= wire.ManageUpdate
		}
		if s := q.Get("retention_age"); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil || d < 0 {
				return nil, wire.Errorf(wire.CodeInvalidArgument, "retention_age %q: want a duration such as 168h, not negative", s)
			}
			req.Flags, req.MaxAge = req.Flags|wire.ManageRetention, uint64(d)
		}
		if s := q.Get("retention_bytes"); s != "" {
			b, err := strconv.ParseInt(s, 10, 64)
			if err != nil || b < 0 {
				return nil, wire.Errorf(wire.CodeInvalidArgument, "retention_bytes %q: want a whole number of bytes, not negative", s)
			}
			req.Flags, req.MaxBytes = req.Flags|wire.ManageRetention, uint64(b)
		}
		ti, e := m.CreateTopic(req)
		return ti, e
	})))
	remove := func(op byte) http.HandlerFunc {
		return stateChanging(admin(func(m *Manager, r *http.Request) (any, *wire.Error) {
			req := &wire.TopicRemove{Topic: r.PathValue("topic"), Op: op}
			if force(r) {
				req.Flags = wire.ManageForce
			}
			records, e := m.RemoveTopic(req)
			return map[string]uint64{"records_deleted": records}, e
		}))
	}
	mux.HandleFunc("POST /v1/topics/{topic}/purge", remove(wire.RemovePurge))
	mux.HandleFunc("DELETE /v1/topics/{topic}", remove(wire.RemoveDelete))
}

func force(r *http.Request) bool { return r.URL.Query().Get("force") == "true" }

// adminManage runs h as the operator, in tenant ?tenant= when given, and writes its result
// as JSON, or its error with the HTTP status of its code.
func adminManage(local Local, region bool, h func(m *Manager, r *http.Request) (any, *wire.Error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		a := &auth.Principal{Name: "the admin API"}
		if t := r.URL.Query().Get("tenant"); t != "" {
			if !auth.ValidTenant(t) {
				WriteError(w, wire.Errorf(wire.CodeInvalidArgument, "tenant %q: want 1-64 characters of [A-Za-z0-9_-]", t))
				return
			}
			a = auth.NewPrincipal("the admin API", auth.Credential{Tenant: t})
		}
		m := &Manager{Request: Request{Ctx: r.Context(), A: a}, Local: local, Region: region}
		v, e := h(m, r)
		if e != nil {
			WriteError(w, e)
			return
		}
		WriteJSON(w, v)
	}
}

// WriteError writes e as an admin API's JSON error, with the HTTP status of its code.
func WriteError(w http.ResponseWriter, e *wire.Error) {
	status := http.StatusInternalServerError
	switch e.Code {
	case wire.CodeNotFound:
		status = http.StatusNotFound
	case wire.CodeInUse:
		status = http.StatusConflict
	case wire.CodeInvalidArgument, wire.CodeInvalidTopic, wire.CodeOffsetOutOfRange:
		status = http.StatusBadRequest
	case wire.CodeForbidden:
		status = http.StatusForbidden
	case wire.CodeUnavailable:
		status = http.StatusBadGateway
	case wire.CodeShuttingDown:
		status = http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": e.Message, "code": uint64(e.Code)})
}

// consumerJSON is cs as the admin API shows them to a.
func consumerJSON(a *auth.Principal, cs []Consumer, withTopics bool) []ConsumerInfo {
	out := make([]ConsumerInfo, 0, len(cs))
	for _, c := range cs {
		ci := c.Info(a, withTopics)
		j := ConsumerInfo{Tenant: a.Tenant, Name: ci.Name, Kind: ci.Kind, Pattern: ci.Pattern,
			Pending: ci.Pending, Members: int(ci.Members), LastAck: timeOrNil(ci.LastAck)}
		if a.Tenant == "" {
			j.Tenant, j.Name = SplitConsumer(ci.Name)
		}
		g := ci.Group
		if g != nil {
			j.GroupJSON = &GroupJSON{AckWait: time.Duration(min(g.AckWait, 1<<63-1)).String(), MaxDeliver: g.MaxDeliver,
				DeadLetter: g.DeadLetter, Order: wireOrderName(g.Order), Outstanding: g.Outstanding}
		}
		for i, t := range ci.Topics {
			jt := ConsumerTopic{Topic: t.Topic, Resume: t.Resume, Next: t.Next, Pending: t.Pending, Updated: timeOrNil(t.Updated)}
			if g != nil && i < len(g.TopicOutstanding) {
				floor, out := t.Resume, g.TopicOutstanding[i]
				jt.Floor, jt.Outstanding = &floor, &out
			}
			j.Topics = append(j.Topics, jt)
		}
		out = append(out, j)
	}
	return out
}

func timeOrNil(ns int64) *time.Time {
	if ns == 0 {
		return nil
	}
	t := time.Unix(0, ns).UTC()
	return &t
}

// wireOrderName names a group's order as the CLI's --order takes it: none, topic or key.
func wireOrderName(o byte) string { return strings.TrimPrefix(groups.OrderName(o), "by ") }

// WriteJSON writes v as an admin API's indented JSON answer.
func WriteJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
