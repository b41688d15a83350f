package node

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"

	"github.com/quicmq/quicmq/internal/certs"
	"github.com/quicmq/quicmq/internal/wire"
)

// tlsSetup is the node's TLS material: the listener's configuration, which serves clients
// (ALPN quicmq/1) and peers (ALPN quicmq-peer/1, mutual TLS against the mesh CA) on one
// socket, and the client-side configuration for dialing peers.
type tlsSetup struct {
	server *tls.Config
	peer   *tls.Config // nil when the node has no mesh CA (Config.TLS given)
}

// setupTLS builds the configuration from Config.TLS, or from the CA in CADir (created on
// first start, shared by every node of a mesh) and a node certificate issued from it for the
// node's name and addresses.
func (n *Node) setupTLS() (*tlsSetup, error) {
	if n.cfg.TLS != nil {
		c := n.cfg.TLS.Clone()
		c.MinVersion = tls.VersionTLS13
		c.NextProtos = []string{wire.ALPN}
		return &tlsSetup{server: c}, nil
	}
	cert, pool, err := n.nodeCertificate()
	if err != nil {
		return nil, err
	}

	// Each listener refuses the other's credentials: a client may present a certificate of
	// the mesh CA made for clients only (client-authentication usage; it maps to a
	// Credential by Subject), never a node's; a peer must present a node's (server and
	// client usages).
	clients := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{wire.ALPN},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    pool,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) > 0 && slices.Contains(cs.PeerCertificates[0].ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
				return fmt.Errorf("node: %q is a node certificate: clients authenticate with a token or a client certificate", cs.PeerCertificates[0].Subject.CommonName)
			}
			return nil
		},
	}
	peers := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{wire.PeerALPN},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || !slices.Contains(cs.PeerCertificates[0].ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
				return errors.New("node: node-to-node links need a node certificate of the mesh CA, not a client's")
			}
			return nil
		},
	}
	server := &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: []string{wire.ALPN, wire.PeerALPN},
		// A peer offers only the peer ALPN and must present a certificate of the mesh CA;
		// a client offers the client ALPN and is authenticated by its token.
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			if slices.Contains(hello.SupportedProtos, wire.PeerALPN) {
				return peers, nil
			}
			return clients, nil
		},
	}
	dial := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
	}
	return &tlsSetup{server: server, peer: dial}, nil
}

// nodeCertificate returns the node's certificate and the pool of trusted CAs: from
// CertFile/KeyFile and CABundle when given (no CA key on the node), else issued from the CA
// in CADir, created there on first start.
func (n *Node) nodeCertificate() (tls.Certificate, *x509.CertPool, error) {
	c := n.cfg
	n.caFile = c.CABundle
	if n.caFile == "" {
		n.caFile = filepath.Join(c.CADir, "ca.pem")
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return tls.Certificate{}, nil, fmt.Errorf("node: certificate %s / key %s: %w", c.CertFile, c.KeyFile, err)
		}
		pool, err := certs.LoadCAPool(n.caFile)
		if err != nil {
			return tls.Certificate{}, nil, fmt.Errorf("node: trusted CAs: %w", err)
		}
		return cert, pool, nil
	}
	ca, created, err := certs.EnsureCA(c.CADir)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("node: certificate authority in %s: %w", c.CADir, err)
	}
	if created {
		n.log.Info("created a certificate authority; clients trust it with --ca", "ca", filepath.Join(c.CADir, "ca.pem"))
	}
	// The node's name is a SAN too: peers dial by address but verify the name they learnt
	// from gossip.
	hosts := []string{c.Name, "localhost", "127.0.0.1", "::1"}
	for _, a := range []string{c.Listen, c.Advertise} {
		if h, _, err := net.SplitHostPort(a); err == nil && h != "" && !net.ParseIP(h).IsUnspecified() && !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	cert, err := certs.EnsureNodeCert(filepath.Join(c.DataDir, "tls"), ca, c.Name, hosts)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("node: node certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	if c.CABundle != "" { // a CA rotation: trust the bundle's CAs too
		bundle, err := certs.LoadCAPool(c.CABundle)
		if err != nil {
			return tls.Certificate{}, nil, fmt.Errorf("node: trusted CAs: %w", err)
		}
		pool = bundle
		pool.AddCert(ca.Cert)
	}
	return cert, pool, nil
}
