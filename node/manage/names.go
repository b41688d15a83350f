package manage

import (
	"slices"

	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/auth"
)

// Consumer names and the tenant's cap (Here), which the node's sessions ask before they
// make a durable or a group: a name names one consumer, durable or group, so that
// management can name it, and a tenant's stored consumers on a node are bounded
// (MaxDurablesPerTenant), since only `quicmq consumers rm` removes them.

// GroupNameTaken reports whether a group named name (stored) is stored: a durable of that
// name is refused, so that management names one consumer.
func (h *Here) GroupNameTaken(name string) bool {
	_, _, ok, _ := h.cfg.Wal.Group(name) // a damaged state is no name (loading the group reports it)
	return ok
}

// durableNameTaken reports whether durable positions named name (stored) exist: a new group
// of that name is refused.
func (h *Here) durableNameTaken(name string) bool {
	return slices.Contains(h.cfg.Wal.PositionNames(name), name)
}

// CheckNewGroup refuses a group that is not stored yet when a durable consumer has its name
// (stored) or when a's tenant is at MaxDurablesPerTenant.
func (h *Here) CheckNewGroup(a *auth.Principal, name string) *wire.Error {
	if h.cfg.Groups.Group(name) != nil || h.GroupNameTaken(name) {
		return nil
	}
	if h.durableNameTaken(name) {
		return wire.Errorf(wire.CodeConflict, "%q is the name of a durable consumer: a consumer group needs a name of its own", a.ConsumerView(name))
	}
	if a.Tenant != "" {
		return h.CheckDurables(a, name)
	}
	return nil
}

// groupCount is how many groups with prefix are stored (for MaxDurablesPerTenant), and
// whether name is one of them.
func (h *Here) groupCount(prefix, name string) (int, bool) {
	names, err := h.cfg.Wal.GroupNames(prefix)
	if err != nil {
		h.cfg.Log.Warn("counting groups failed", "prefix", prefix, "err", err)
	}
	return len(names), slices.Contains(names, name)
}

// CheckDurables refuses a tenant's new durable consumer or consumer group past
// MaxDurablesPerTenant (counting the durables with a position and the groups with state
// stored on this node: both are stored state that only `consumers rm` removes).
func (h *Here) CheckDurables(a *auth.Principal, durable string) *wire.Error {
	if durable == "" {
		return nil
	}
	prefix := "tenant/" + a.Tenant + "/"
	names := h.cfg.Wal.PositionNames(prefix)
	groups, isGroup := h.groupCount(prefix, durable)
	if len(names)+groups < h.cfg.MaxDurablesPerTenant || slices.Contains(names, durable) || isGroup {
		return nil
	}
	return wire.Errorf(wire.CodeLimit, "tenant %q has %d durable consumers and consumer groups on this node, the limit is %d (MaxDurablesPerTenant); reuse one, or remove one with `quicmq consumers rm NAME` (`quicmq consumers` lists them)",
		a.Tenant, len(names)+groups, h.cfg.MaxDurablesPerTenant)
}
