package client

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestCheckGroupOptions: group settings without a group, a group with a durable, and values
// the frame cannot carry are refused before anything is sent, naming the option.
func TestCheckGroupOptions(t *testing.T) {
	for _, c := range []struct {
		opts SubscribeOptions
		want string // "" accepted
	}{
		{SubscribeOptions{Group: "g", AckWait: time.Second, MaxDeliver: 3, DeadLetter: "dlq", OrderBy: OrderByKey}, ""},
		{SubscribeOptions{Durable: "d", Standby: true}, ""},
		{SubscribeOptions{AckWait: time.Second}, "set Group"},
		{SubscribeOptions{OrderBy: OrderByTopic}, "set Group"},
		{SubscribeOptions{Group: "g", Durable: "d"}, "names no durable"},
		{SubscribeOptions{Group: "g", AckWait: 1500 * time.Microsecond}, "whole milliseconds"},
		{SubscribeOptions{Group: "g", AckWait: 25 * time.Hour}, "24 h"},
		{SubscribeOptions{Group: "g", MaxDeliver: -1}, "max-deliver"},
		{SubscribeOptions{Group: "g", OrderBy: 7}, "order 7"},
		{SubscribeOptions{Standby: true}, "set Durable"},
	} {
		err := checkSubscribe("a", c.opts)
		var e *Error
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", c.opts, err)
		case c.want != "" && (!errors.As(err, &e) || e.Code != CodeInvalidArgument || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: %v, want CodeInvalidArgument naming %q", c.opts, err, c.want)
		}
	}
	if b := groupBlock(SubscribeOptions{}); b != nil {
		t.Fatalf("group block without a group: %+v", b)
	}
}
