package manage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/quicmq/quicmq/federation"
	"github.com/quicmq/quicmq/internal/wire"
	"github.com/quicmq/quicmq/node/auth"
	"github.com/quicmq/quicmq/wal"
)

// This node's topics (Here): created, configured, purged and deleted in its own log. A
// replicated topic is purged or deleted through its raft group (HereConfig.RemoveReplicated,
// node/replretain.go), which checks its dependents and brings the live groups in step with
// CheckDependents and Removed too.

// createTopic creates topic (node name) with cfg, or changes its configuration (update).
func (h *Here) createTopic(ctx context.Context, a *auth.Principal, topic string, cfg wal.TopicConfig, update bool) (wal.TopicInfo, *wire.Error) {
	var ti wal.TopicInfo
	var err error
	if update {
		ti, err = h.cfg.Wal.SetTopicConfig(ctx, topic, cfg)
	} else {
		ti, err = h.cfg.Wal.CreateTopic(ctx, topic, cfg)
	}
	var exists *wal.TopicExistsError
	if errors.As(err, &exists) {
		return wal.TopicInfo{}, wire.Errorf(wire.CodeInvalidArgument, "topic %q exists with another configuration (%s): update it with --update",
			a.ClientName(topic), exists.Config)
	}
	if err != nil {
		return wal.TopicInfo{}, walErr(err)
	}
	h.cfg.Log.Info("topic created or configured", "topic", topic, "config", cfg.String(), "by", a.Name)
	return ti, nil
}

// RemoveTopic purges or deletes topic (node name), refused while consumers or mirror
// cursors have positions on it unless forced. It returns the records deleted.
func (h *Here) RemoveTopic(ctx context.Context, a *auth.Principal, topic string, op byte, force bool) (uint64, *wire.Error) {
	if _, _, ok := h.cfg.Wal.Bounds(topic); !ok {
		return 0, wire.Errorf(wire.CodeNotFound, "no topic %q on this node", a.ClientName(topic))
	}
	del := op == wire.RemoveDelete
	if e := h.CheckDependents(a, topic, del, force); e != nil {
		return 0, e
	}
	var records uint64
	var err error
	if del {
		records, err = h.cfg.Wal.DeleteTopic(ctx, topic)
		if err == nil {
			h.Removed(topic, true, 0)
		}
	} else {
		var r wal.PurgeResult
		r, err = h.cfg.Wal.PurgeTopic(ctx, topic)
		records = r.Records
		if err == nil {
			h.Removed(topic, false, r.Next)
		}
	}
	if err != nil {
		return 0, walErr(err)
	}
	h.cfg.Log.Info("topic "+removeOp(del)+"d", "topic", topic, "records", records, "forced", force, "by", a.Name)
	return records, nil
}

// removeOp names a purge (del false) or a delete.
func removeOp(del bool) string {
	if del {
		return "delete"
	}
	return "purge"
}

// CheckDependents refuses to purge or delete (del) topic (node name) while it has
// dependents, unless forced, naming them as a sees them.
func (h *Here) CheckDependents(a *auth.Principal, topic string, del, force bool) *wire.Error {
	if force {
		return nil
	}
	deps := h.dependents(a, topic)
	if len(deps) == 0 {
		return nil
	}
	loses := "they would skip every record not yet read"
	if del {
		loses = "their positions on it would be deleted with it"
	}
	return wire.Errorf(wire.CodeInUse, "topic %q has dependents: %s; %s. Remove them first, or %s with --force",
		a.ClientName(topic), strings.Join(deps, ", "), loses, removeOp(del))
}

// dependents names what has a position on topic: durable consumers and consumer groups (as
// a sees them) and mirror cursors (by region).
func (h *Here) dependents(a *auth.Principal, topic string) []string {
	var deps []string
	h.cfg.Wal.Positions(wal.PositionFilter{Topic: topic}, func(p wal.PositionInfo) bool {
		if region, ok := strings.CutPrefix(p.Name, federation.CursorPrefix); ok {
			deps = append(deps, fmt.Sprintf("the mirror cursor of region %q", region))
		} else {
			deps = append(deps, fmt.Sprintf("durable consumer %q", a.ConsumerView(p.Name)))
		}
		return true
	})
	deps = append(deps, h.groupDependents(a, topic)...)
	slices.Sort(deps)
	return deps
}

// Removed brings the node in step with a purge (the live groups' floor moves up to cut) or
// a delete (the live groups forget the topic, and its publish series go) that the log has
// done to the stored states already.
func (h *Here) Removed(topic string, deleted bool, cut uint64) {
	if deleted {
		h.cfg.ForgetTopic(topic)
	}
	for _, g := range h.cfg.Groups.All() {
		if deleted {
			g.DropTopic(topic)
		} else {
			g.Purged(topic, cut)
		}
	}
}
