package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// File names inside a certificate directory.
const (
	CACertFile   = "ca.pem"
	CAKeyFile    = "ca-key.pem"
	NodeCertFile = "node.pem"
	NodeKeyFile  = "node-key.pem"
)

const (
	caValidity   = 10 * 365 * 24 * time.Hour
	certValidity = 365 * 24 * time.Hour
	// renewBefore is how long before expiry EnsureNodeCert replaces a certificate,
	// so that a node restarted now and then never runs into an expired one.
	renewBefore = 30 * 24 * time.Hour
	// backdate moves NotBefore into the past: a peer whose clock is a little behind
	// must still accept a certificate issued just now.
	backdate = time.Hour
)

var (
	ErrNoCertificate = errors.New("certs: no certificate in PEM data")
	ErrNoKey         = errors.New("certs: no private key in PEM data")
	ErrKeyMismatch   = errors.New("certs: private key does not match certificate")
	ErrNotCA         = errors.New("certs: certificate is not a CA")
	ErrExpired       = errors.New("certs: certificate has expired")
	ErrCAKeyMissing  = errors.New("certs: CA certificate present but its key is missing")
)

// CA is a certificate authority that can issue certificates.
type CA struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte // Cert, PEM-encoded: what clients are given to trust
}

// EnsureCA loads the CA in dir (ca.pem and ca-key.pem), or creates both if there is
// none; created reports the latter. The directory is created (0700) if needed.
func EnsureCA(dir string) (ca *CA, created bool, err error) {
	return ensureCA(dir, time.Now())
}

func ensureCA(dir string, now time.Time) (*CA, bool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("certs: ensure CA: %w", err)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, false, err
	}
	defer unlock()

	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	certPEM, certErr := os.ReadFile(certPath)
	keyPEM, keyErr := os.ReadFile(keyPath)
	switch {
	case certErr == nil && keyErr == nil:
		ca, err := parseCA(certPEM, keyPEM, now)
		if err == nil {
			return ca, false, nil
		}
		if !errors.Is(err, ErrExpired) {
			return nil, false, fmt.Errorf("certs: load CA %s: %w", certPath, err)
		}
		// Expired: nothing can verify against it any more, so replacing it loses
		// nothing.
	case errors.Is(certErr, fs.ErrNotExist):
		// No CA, or only the key of an interrupted creation (the certificate is
		// written last): create one.
	case certErr != nil:
		return nil, false, fmt.Errorf("certs: load CA: %w", certErr)
	case errors.Is(keyErr, fs.ErrNotExist):
		return nil, false, fmt.Errorf("certs: load CA %s: %w", keyPath, ErrCAKeyMissing)
	default:
		return nil, false, fmt.Errorf("certs: load CA: %w", keyErr)
	}

	ca, keyPEM, err := newCA(now)
	if err != nil {
		return nil, false, err
	}
	if err := writeFileAtomic(keyPath, keyPEM, 0o600); err != nil {
		return nil, false, fmt.Errorf("certs: write CA key: %w", err)
	}
	if err := writeFileAtomic(certPath, ca.CertPEM, 0o644); err != nil {
		return nil, false, fmt.Errorf("certs: write CA certificate: %w", err)
	}
	return ca, true, nil
}

// newCA creates a self-signed CA valid from now and returns it with its key in PEM.
func newCA(now time.Time) (*CA, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: create CA: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		// The serial in the name tells CAs apart in logs and error messages
		// ("certificate signed by unknown authority" is otherwise all one gets).
		Subject:               pkix.Name{Organization: []string{"QuicMQ"}, CommonName: "QuicMQ CA " + hex.EncodeToString(serial.Bytes()[:4])},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true, // it signs leaves only
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: create CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: create CA: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	ca := &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	return ca, keyPEM, nil
}

// parseCA checks that certPEM holds a CA certificate, valid at now, whose key is in
// keyPEM.
func parseCA(certPEM, keyPEM []byte, now time.Time) (*CA, error) {
	block := firstBlock(certPEM, func(typ string) bool { return typ == "CERTIFICATE" })
	if block == nil {
		return nil, ErrNoCertificate
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA || !cert.BasicConstraintsValid {
		return nil, ErrNotCA
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, err
	}
	if !publicKeysEqual(cert.PublicKey, key.Public()) {
		return nil, ErrKeyMismatch
	}
	if now.After(cert.NotAfter) {
		return nil, fmt.Errorf("%w (not after %s)", ErrExpired, cert.NotAfter.UTC().Format(time.RFC3339))
	}
	return &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(block)}, nil
}

// LoadCAPool reads PEM certificates from file into a pool, for a client's --ca.
func LoadCAPool(file string) (*x509.CertPool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("certs: load CA pool: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("certs: load CA pool %s: %w", file, ErrNoCertificate)
	}
	return pool, nil
}

func randomSerial() (*big.Int, error) {
	// 128 random bits, positive and (with the top bit forced) always 16 bytes long.
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("certs: serial number: %w", err)
	}
	b[0] = b[0]&0x7f | 0x40
	return new(big.Int).SetBytes(b), nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	k, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && k.Equal(b)
}
