package client_test

import (
	"strings"
	"testing"

	"github.com/quicmq/quicmq/client"
	"github.com/quicmq/quicmq/node"
)

// The node's refusals read as one sentence through the SDK: the operation, the code, the
// reason once.
func TestNodeErrorsReadOnce(t *testing.T) {
	n := newTestNode(t)
	c := dial(t, n)
	ctx := testCtx(t)
	_, err := c.Publish(ctx, client.Message{Topic: "bad..topic", Payload: []byte("x")})
	if want := `client: publish to "bad..topic": invalid topic: empty token at byte 4`; err == nil || err.Error() != want {
		t.Errorf("publish to a bad topic: %v\nwant %s", err, want)
	}
	if errorCode(err) != client.CodeInvalidTopic {
		t.Errorf("publish to a bad topic: code %v, want invalid topic", errorCode(err))
	}
	_, err = c.Subscribe(ctx, "a.>.b", client.SubscribeOptions{})
	if errorCode(err) != client.CodeInvalidTopic || err == nil || !strings.HasPrefix(err.Error(), `client: subscribe "a.>.b": invalid topic: `) ||
		strings.Count(err.Error(), "invalid") != 1 {
		t.Errorf("subscribe to a bad pattern: %v", err)
	}
	_, err = c.Topics(ctx, "x..y")
	if errorCode(err) != client.CodeInvalidTopic || err == nil || !strings.HasPrefix(err.Error(), `client: topics "x..y": invalid topic: `) ||
		strings.Count(err.Error(), "invalid") != 1 {
		t.Errorf("topics with a bad pattern: %v", err)
	}
	t.Logf("topics: %v", err)

	// A refused HELLO names the dial and the node's reason, once.
	secured := newTestNode(t, func(c *node.Config) { c.Tokens = []string{"0123456789abcdef0123"} })
	_, err = client.Dial(ctx, client.Options{CAFile: secured.CAFile(), Token: "wrong-token-wrong-token"}, secured.Addr().String())
	prefix := "client: dial " + secured.Addr().String() + ": unauthorized: "
	if errorCode(err) != client.CodeUnauthorized || err == nil || !strings.HasPrefix(err.Error(), prefix) ||
		strings.Count(err.Error(), "unauthorized") != 1 || strings.Count(err.Error(), "client: ") != 1 {
		t.Errorf("dial with a wrong token: %v, want %q and the reason", err, prefix)
	}
	t.Logf("wrong token: %v", err)
}
