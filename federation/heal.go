package federation

import (
	"errors"

	"github.com/quic-go/quic-go"
)

// Application error codes of the healing rules (docs/protocol.md, node-to-node).
const (
	// appSuperseded closes an accepted connection of a peer that has opened a newer one: a
	// node's link holds one connection at a time, so the older one is dead to the peer even
	// while QUIC on this side still thinks it alive (its packets go to a socket that is gone).
	appSuperseded quic.ApplicationErrorCode = 0x11
	// appPeerRestarted closes a link's connection to a peer that announced a new incarnation:
	// that connection leads to the peer's previous process.
	appPeerRestarted quic.ApplicationErrorCode = 0x12
)

// acceptedPeer is the newest connection a peer opened to this node, and the incarnation it
// announced on it.
type acceptedPeer struct {
	conn        *quic.Conn
	incarnation uint64
}

// peerHello applies the healing rules to a catalog stream (the first stream of a peer's
// link connection) that arrived on conn with the peer's incarnation (0: not sent):
//   - a new connection supersedes that peer's older one at once: it is closed, its serving
//     streams end, and the peer's mirrors resume from their cursors on the new one;
//   - a new incarnation (the peer restarted) also ends this node's own link connection to
//     it, which leads to the previous process: the link redials at once.
//
// Called on the catalog stream's goroutine.
func (f *Federation) peerHello(conn *quic.Conn, incarnation uint64) {
	name := peerName(conn)
	if name == "" || conn.Context().Err() != nil {
		// Ended already: a catalog stream read late must not supersede the newer connection
		// that replaced it.
		return
	}
	f.mu.Lock()
	prev, known := f.mu.accepted[name]
	f.mu.accepted[name] = acceptedPeer{conn: conn, incarnation: incarnation}
	var restarted *link
	if known && prev.incarnation != 0 && incarnation != 0 && prev.incarnation != incarnation {
		restarted = f.mu.links[name]
	}
	f.mu.Unlock()
	if known && prev.conn != conn && prev.conn.Context().Err() == nil {
		f.log.Info("peer opened a new connection: closing its older one", "peer", name)
		prev.conn.CloseWithError(appSuperseded, "superseded by a newer connection of the peer")
	}
	if restarted != nil {
		restarted.peerRestarted()
	}
}

// peerName is the node name a peer's certificate carries (its common name), "" without one.
func peerName(conn *quic.Conn) string {
	certs := conn.ConnectionState().TLS.PeerCertificates
	if len(certs) == 0 {
		return ""
	}
	return certs[0].Subject.CommonName
}

// peerRestarted ends the link's connection to the peer's previous process, or cuts short a
// dial or back-off in progress, so the link reaches the new process now.
func (l *link) peerRestarted() {
	l.mu.Lock()
	conn, cancelDial := l.mu.conn, l.mu.cancelDial
	l.mu.Unlock()
	select {
	case l.redial <- struct{}{}:
	default:
	}
	if conn != nil {
		l.log.Info("peer restarted (new incarnation): closing the connection to its previous process and redialing")
		conn.CloseWithError(appPeerRestarted, "peer restarted")
		return
	}
	if cancelDial != nil {
		cancelDial()
	}
}

// closedForPeerRestart reports whether err is this side's closing of a connection to a
// peer's previous process (peerRestarted).
func closedForPeerRestart(err error) bool {
	var ae *quic.ApplicationError
	return errors.As(err, &ae) && !ae.Remote && ae.ErrorCode == appPeerRestarted
}

// supersededByPeer reports whether err is the peer's closing of this link's connection
// because the link has a newer one (peerHello on its side).
func supersededByPeer(err error) bool {
	var ae *quic.ApplicationError
	return errors.As(err, &ae) && ae.Remote && ae.ErrorCode == appSuperseded
}
