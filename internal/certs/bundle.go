package certs

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// File names of a client's credentials, as `quicmq certs client` writes them.
const (
	ClientCertFile = "client.pem"
	ClientKeyFile  = "client-key.pem"
)

var ErrNoCA = errors.New("certs: no CA in directory")

// Kind says what a certificate issued with IssueFiles is for: the usages it carries
// and the names of the files it is written to.
type Kind int

const (
	// KindNode is a node's certificate: ServerAuth and ClientAuth (one certificate
	// for both ends of node-to-node mTLS), written to node.pem and node-key.pem.
	KindNode Kind = iota
	// KindClient is a client's certificate: ClientAuth only, so that it can never
	// stand in for a node. Written to client.pem and client-key.pem.
	KindClient
)

func (k Kind) files() (cert, key string, usage []x509.ExtKeyUsage) {
	if k == KindClient {
		return ClientCertFile, ClientKeyFile, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	return NodeCertFile, NodeKeyFile, defaultUsage
}

// LoadCA loads the CA in dir (ca.pem and ca-key.pem) without ever creating one:
// the operator's tools issue from an existing CA, and a typo in a directory name
// must not silently start a second CA that nobody trusts. An absent CA is ErrNoCA.
func LoadCA(dir string) (*CA, error) {
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	certPEM, err := os.ReadFile(certPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("certs: load CA %s: %w", dir, ErrNoCA)
	}
	if err != nil {
		return nil, fmt.Errorf("certs: load CA: %w", err)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("certs: load CA %s: %w", keyPath, ErrCAKeyMissing)
	}
	if err != nil {
		return nil, fmt.Errorf("certs: load CA: %w", err)
	}
	ca, err := parseCA(certPEM, keyPEM, time.Now())
	if err != nil {
		return nil, fmt.Errorf("certs: load CA %s: %w", certPath, err)
	}
	return ca, nil
}

// IssueFiles issues a certificate of the given kind from ca for commonName and hosts
// and writes it into outDir (created 0700) with the key (0600) and a copy of the CA
// certificate (ca.pem, never the CA's key), so that outDir is all a node or client
// needs. It returns the paths written, certificate first.
func (ca *CA) IssueFiles(outDir string, kind Kind, commonName string, hosts []string) ([]string, error) {
	certName, keyName, usage := kind.files()
	cert, err := ca.Issue(commonName, hosts, usage...)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(outDir, 0o700); err != nil {
		return nil, fmt.Errorf("certs: issue files: %w", err)
	}
	unlock, err := lockDir(outDir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	certPath, keyPath := filepath.Join(outDir, certName), filepath.Join(outDir, keyName)
	if err := WritePair(certPath, keyPath, cert); err != nil {
		return nil, err
	}
	caPath := filepath.Join(outDir, CACertFile)
	if err := writeFileAtomic(caPath, ca.CertPEM, 0o644); err != nil {
		return nil, fmt.Errorf("certs: write CA certificate: %w", err)
	}
	return []string{certPath, keyPath, caPath}, nil
}

// Info is what an operator needs to know about a certificate when rotating it.
type Info struct {
	Subject   string
	Issuer    string
	Serial    string
	NotBefore time.Time
	NotAfter  time.Time
	IsCA      bool
	DNSNames  []string
	IPs       []string
	Usage     []string // "server", "client"
}

// Inspect parses every certificate in PEM data (a chain or a CA bundle).
func Inspect(data []byte) ([]Info, error) {
	var out []Info
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certs: inspect: %w", err)
		}
		info := Info{
			Subject: c.Subject.String(), Issuer: c.Issuer.String(), Serial: c.SerialNumber.Text(16),
			NotBefore: c.NotBefore, NotAfter: c.NotAfter, IsCA: c.IsCA, DNSNames: c.DNSNames,
		}
		for _, ip := range c.IPAddresses {
			info.IPs = append(info.IPs, ip.String())
		}
		for _, u := range c.ExtKeyUsage {
			switch u {
			case x509.ExtKeyUsageServerAuth:
				info.Usage = append(info.Usage, "server")
			case x509.ExtKeyUsageClientAuth:
				info.Usage = append(info.Usage, "client")
			}
		}
		out = append(out, info)
	}
	if len(out) == 0 {
		return nil, ErrNoCertificate
	}
	return out, nil
}

// VerifyFiles checks that the certificate in certFile matches the key in keyFile and
// chains to one of the CAs in caFile (a bundle during a CA rotation) for the given
// usage, at the present time. It is what `quicmq certs verify` runs before an
// operator restarts a node on new files.
func VerifyFiles(certFile, keyFile, caFile string, usage x509.ExtKeyUsage) (*x509.Certificate, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("certs: verify %s: %w", certFile, err)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("certs: verify %s: %w", certFile, err)
		}
	}
	pool, err := LoadCAPool(caFile)
	if err != nil {
		return nil, err
	}
	inter := x509.NewCertPool()
	for _, der := range pair.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return nil, fmt.Errorf("certs: verify %s against %s: %w", certFile, caFile, err)
	}
	return leaf, nil
}
