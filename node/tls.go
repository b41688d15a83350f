package node

import (
	"crypto/tls"
	"fmt"
	"net"
	"path/filepath"

	"github.com/quicmq/quicmq/internal/certs"
	"github.com/quicmq/quicmq/internal/wire"
)

// setupTLS returns the listener's TLS configuration: the configured one (with the ALPN and
// TLS 1.3 floor enforced), or one built from the CA in CADir, created on first start, with a
// node certificate for the listen address, localhost and the host's name.
func (n *Node) setupTLS() (*tls.Config, error) {
	if n.cfg.TLS != nil {
		c := n.cfg.TLS.Clone()
		c.MinVersion = tls.VersionTLS13
		c.NextProtos = []string{wire.ALPN}
		return c, nil
	}
	ca, created, err := certs.EnsureCA(n.cfg.CADir)
	if err != nil {
		return nil, fmt.Errorf("node: certificate authority in %s: %w", n.cfg.CADir, err)
	}
	if created {
		n.log.Info("created a certificate authority; clients trust it with --ca", "ca", filepath.Join(n.cfg.CADir, "ca.pem"))
	}
	hosts := []string{"localhost", "127.0.0.1", "::1"}
	if h, _, err := net.SplitHostPort(n.cfg.Listen); err == nil && h != "" {
		hosts = append(hosts, h)
	}
	cert, err := certs.EnsureNodeCert(filepath.Join(n.cfg.DataDir, "tls"), ca, n.cfg.Name, hosts)
	if err != nil {
		return nil, fmt.Errorf("node: node certificate: %w", err)
	}
	n.caFile = filepath.Join(n.cfg.CADir, "ca.pem")
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{wire.ALPN},
	}, nil
}
