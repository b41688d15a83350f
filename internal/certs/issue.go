package certs

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

var ErrBadHost = errors.New("certs: invalid host")

// defaultUsage lets one certificate serve as both ends of node-to-node mTLS.
var defaultUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}

// Issue creates a key pair and a certificate for it signed by ca: commonName as the
// subject, hosts (IP addresses and DNS names) as SANs, valid for a year (at most
// until the CA expires), with the given extended key usages, ServerAuth and
// ClientAuth if none are given. The result carries Leaf.
func (ca *CA) Issue(commonName string, hosts []string, usage ...x509.ExtKeyUsage) (tls.Certificate, error) {
	return ca.issue(commonName, hosts, time.Now(), usage)
}

func (ca *CA) issue(commonName string, hosts []string, now time.Time, usage []x509.ExtKeyUsage) (tls.Certificate, error) {
	if ca == nil || ca.Cert == nil || ca.Key == nil {
		return tls.Certificate{}, errors.New("certs: issue: CA without certificate or key")
	}
	dnsNames, ips, err := splitHosts(hosts)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("certs: issue %q: %w", commonName, err)
	}
	if len(usage) == 0 {
		usage = defaultUsage
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("certs: issue %q: %w", commonName, err)
	}
	serial, err := randomSerial()
	if err != nil {
		return tls.Certificate{}, err
	}
	notAfter := now.Add(certValidity)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"QuicMQ"}, CommonName: commonName},
		NotBefore:             now.Add(-backdate),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           slices.Clone(usage),
		BasicConstraintsValid: true,
		DNSNames:              dnsNames,
		IPAddresses:           ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("certs: issue %q: %w", commonName, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("certs: issue %q: %w", commonName, err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// splitHosts sorts hosts into DNS names and IP addresses, dropping duplicates.
func splitHosts(hosts []string) (dnsNames []string, ips []net.IP, err error) {
	seen := map[string]bool{}
	for _, h := range hosts {
		k, err := hostKey(h)
		if err != nil {
			return nil, nil, err
		}
		if seen[k] {
			continue
		}
		seen[k] = true
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
		} else {
			dnsNames = append(dnsNames, h)
		}
	}
	return dnsNames, ips, nil
}

// hostKey is the canonical form of a host, for comparing a certificate's SANs with
// the hosts asked for: "ip:" + the address, or "dns:" + the lower-cased name.
func hostKey(h string) (string, error) {
	if ip := net.ParseIP(h); ip != nil {
		return "ip:" + ip.String(), nil
	}
	if h == "" || strings.ContainsAny(h, " \t\r\n/:") {
		return "", fmt.Errorf("%w %q", ErrBadHost, h)
	}
	return "dns:" + strings.ToLower(h), nil
}

func leafHostKeys(leaf *x509.Certificate) map[string]bool {
	keys := map[string]bool{}
	for _, d := range leaf.DNSNames {
		keys["dns:"+strings.ToLower(d)] = true
	}
	for _, ip := range leaf.IPAddresses {
		keys["ip:"+ip.String()] = true
	}
	return keys
}

// EnsureNodeCert returns the node certificate in dir (node.pem, node-key.pem),
// issuing and writing a new one from ca when it is missing or unusable: unreadable,
// key not matching, not signed by ca, not yet valid or expiring within 30 days, or
// issued for another name, other hosts or without both ServerAuth and ClientAuth.
func EnsureNodeCert(dir string, ca *CA, name string, hosts []string) (tls.Certificate, error) {
	cert, _, err := ensureNodeCert(dir, ca, name, hosts, time.Now())
	return cert, err
}

// ensureNodeCert also returns why the certificate was (re)issued, "" if it was
// reused, for tests.
func ensureNodeCert(dir string, ca *CA, name string, hosts []string, now time.Time) (tls.Certificate, string, error) {
	if ca == nil || ca.Cert == nil {
		return tls.Certificate{}, "", errors.New("certs: ensure node certificate: no CA")
	}
	// Check the request before touching files: a bad host must not cost a reissue.
	want := map[string]bool{}
	for _, h := range hosts {
		k, err := hostKey(h)
		if err != nil {
			return tls.Certificate{}, "", fmt.Errorf("certs: ensure node certificate %q: %w", name, err)
		}
		want[k] = true
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return tls.Certificate{}, "", fmt.Errorf("certs: ensure node certificate: %w", err)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return tls.Certificate{}, "", err
	}
	defer unlock()

	certPath, keyPath := filepath.Join(dir, NodeCertFile), filepath.Join(dir, NodeKeyFile)
	var why string
	cert, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err == nil && cert.Leaf == nil { // only with GODEBUG x509keypairleaf=0
		cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0])
	}
	if err != nil {
		why = "unusable: " + err.Error()
	} else if why = nodeCertProblem(cert.Leaf, ca, name, want, now); why == "" {
		return cert, "", nil
	}
	cert, err = ca.issue(name, hosts, now, nil)
	if err != nil {
		return tls.Certificate{}, "", err
	}
	if err := WritePair(certPath, keyPath, cert); err != nil {
		return tls.Certificate{}, "", err
	}
	return cert, why, nil
}

// nodeCertProblem says what makes leaf unfit to be the node certificate, or "".
func nodeCertProblem(leaf *x509.Certificate, ca *CA, name string, hosts map[string]bool, now time.Time) string {
	switch {
	case !bytes.Equal(leaf.RawIssuer, ca.Cert.RawSubject) || leaf.CheckSignatureFrom(ca.Cert) != nil:
		return "not signed by the CA"
	case now.Before(leaf.NotBefore):
		return "not valid yet"
	case now.Add(renewBefore).After(leaf.NotAfter):
		return "expires " + leaf.NotAfter.UTC().Format(time.RFC3339)
	case leaf.Subject.CommonName != name:
		return fmt.Sprintf("issued to %q", leaf.Subject.CommonName)
	case !maps.Equal(leafHostKeys(leaf), hosts):
		return "issued for other hosts"
	case !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth) ||
		!slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth):
		return "missing ServerAuth or ClientAuth usage"
	}
	return ""
}
