package certs

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// WritePair writes cert's chain to certFile (PEM, mode 0644) and its private key to
// keyFile (PKCS #8 PEM, mode 0600), each atomically. The key is written first: a
// crash in between leaves a pair whose key does not match, which loading detects.
func WritePair(certFile, keyFile string, cert tls.Certificate) error {
	if len(cert.Certificate) == 0 || cert.PrivateKey == nil {
		return errors.New("certs: write pair: certificate or key missing")
	}
	keyPEM, err := encodeKey(cert.PrivateKey)
	if err != nil {
		return err
	}
	var certPEM []byte
	for _, der := range cert.Certificate {
		certPEM = append(certPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	if err := writeFileAtomic(keyFile, keyPEM, 0o600); err != nil {
		return fmt.Errorf("certs: write key: %w", err)
	}
	if err := writeFileAtomic(certFile, certPEM, 0o644); err != nil {
		return fmt.Errorf("certs: write certificate: %w", err)
	}
	return nil
}

func encodeKey(key crypto.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("certs: encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// parseKey reads the first private key in PEM data, in PKCS #8, SEC 1 or PKCS #1
// form (the last two for keys made by other tools).
func parseKey(data []byte) (crypto.Signer, error) {
	block := firstBlock(data, func(typ string) bool { return strings.HasSuffix(typ, "PRIVATE KEY") })
	if block == nil {
		return nil, ErrNoKey
	}
	var key any
	var err error
	switch block.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	}
	if err != nil {
		return nil, fmt.Errorf("certs: parse key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("certs: parse key: %T cannot sign", key)
	}
	return signer, nil
}

func firstBlock(data []byte, want func(typ string) bool) *pem.Block {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil || want(block.Type) {
			return block
		}
	}
}

// writeFileAtomic replaces path with data: readers see the old file or the new
// one, never a part, also after a crash (the data and the rename are synced).
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	ok = true
	return syncDir(dir)
}
