package wire

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func manageFrames() []Frame {
	return []Frame{
		&Consumers{}, &Consumers{Name: "billing"},
		&ConsumerInfo{Name: "billing", Kind: KindDurable, Pattern: "orders.>", Pending: 12, Members: 1, LastAck: 1_700_000_000_000_000_000},
		&ConsumerInfo{Name: "b", Kind: KindGroup, Topics: []ConsumerTopic{
			{Topic: "orders.eu", Resume: 4, Next: 10, Pending: 6, Updated: 5},
			{Topic: "orders.us", Next: 3, Pending: 3},
		}},
		&ConsumerInfo{Name: "workers", Kind: KindGroup, Pattern: "jobs.>", Pending: 9, Members: 2, Topics: []ConsumerTopic{
			{Topic: "jobs.a", Resume: 4, Next: 10, Pending: 7, Updated: 5}, {Topic: "jobs.b", Resume: 1, Next: 3, Pending: 2},
		}, Group: &ConsumerGroup{AckWait: 30e9, MaxDeliver: 5, DeadLetter: "jobs-dlq", Order: OrderKey, Outstanding: 3, TopicOutstanding: []uint64{2, 1}}},
		&ConsumerInfo{Name: "idle", Kind: KindGroup, Pattern: "jobs.>", Group: &ConsumerGroup{AckWait: 1e9, MaxDeliver: 1}},
		&ConsumerReset{Name: "billing", Start: StartTime, StartValue: 1 << 60, Flags: ManageForce},
		&ConsumerDelete{Name: "billing"},
		&TopicCreate{Topic: "orders", Flags: ManageRetention | ManageUpdate, MaxAge: 3600e9, MaxBytes: 1 << 30},
		&TopicCreate{Topic: "orders", Replicas: 5},
		&TopicRemove{Topic: "orders", Op: RemoveDelete, Flags: ManageForce},
		&Done{Count: 42},
		&Hold{Name: "tenant/acme/billing", Shown: "billing", Client: "127.0.0.1:5000", Flags: HoldStandby},
		&Held{},
		&TopicInfo{Name: "orders", First: 1, Next: 9, Bytes: 100},
		&TopicInfo{Name: "orders", First: 1, Next: 9, Bytes: 100, RetentionSet: true, RetentionAge: 5e9},
	}
}

func TestManageFramesRoundTrip(t *testing.T) {
	for _, f := range manageFrames() {
		got, n, err := Decode(Append(nil, f), Limits{})
		if err != nil {
			t.Fatalf("%s: %v", f.Type(), err)
		}
		if n != len(Append(nil, f)) || !reflect.DeepEqual(got, f) {
			t.Fatalf("%s: round trip changed it:\n%#v\n%#v", f.Type(), f, got)
		}
		if s := f.Type().String(); len(s) == 0 || s[0] == 't' {
			t.Errorf("type 0x%02x has no name: %q", byte(f.Type()), s)
		}
	}
	if CodeTopicDeleted.String() != "topic deleted" || CodeInUse.String() != "in use" {
		t.Errorf("code names: %q, %q", CodeTopicDeleted, CodeInUse)
	}
}

// An old TOPIC_INFO (no retention fields) still decodes, as one without retention.
func TestTopicInfoWithoutRetentionFields(t *testing.T) {
	b := Append(nil, &TopicInfo{Name: "a", Next: 3})
	got, _, err := Decode(b, Limits{})
	if err != nil || got.(*TopicInfo).RetentionSet {
		t.Fatalf("got %#v, %v", got, err)
	}
}

func TestConsumerInfoTopicCountChecked(t *testing.T) {
	b := Append(nil, &ConsumerInfo{Name: "a", Topics: []ConsumerTopic{{Topic: "t"}}})
	// Raise the count byte (the last varint before the row) to a count the body cannot hold.
	i := bytes.LastIndexByte(b, 1)
	b[i] = 100
	if _, _, err := Decode(b, Limits{}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("an impossible topic count decoded: %v", err)
	}
}

// TOPIC_CREATE's replica count is an optional last field: absent is the region's, and a 0
// encoded (which no sender writes) is refused.
func TestTopicCreateReplicasField(t *testing.T) {
	old := Append(nil, &TopicCreate{Topic: "a"})
	got, _, err := Decode(old, Limits{})
	if err != nil || got.(*TopicCreate).Replicas != 0 {
		t.Fatalf("without the field: %#v, %v", got, err)
	}
	withZero := Append(nil, &TopicCreate{Topic: "a", Replicas: 1})
	withZero[len(withZero)-1] = 0 // the replica count, a one-byte uvarint
	if _, _, err := Decode(withZero, Limits{}); err == nil || !strings.Contains(err.Error(), "replicas 0") {
		t.Fatalf("replicas 0 encoded: %v, want it refused", err)
	}
}
