// Package certs owns QuicMQ's TLS material: a node's private CA, the certificates it
// issues to nodes and clients, and the files they live in.
//
// A node started without configured certificates calls EnsureCA on its certificate
// directory, which creates a CA (DIR/ca.pem, DIR/ca-key.pem) the first time and
// reuses it afterwards, then EnsureNodeCert for its own certificate. Clients trust
// the CA with --ca DIR/ca.pem (LoadCAPool). Several nodes may share one CA
// directory; each issues its own certificate from it, with both the ServerAuth and
// ClientAuth usages, so that one certificate serves both ends of node-to-node mTLS.
//
// Keys are ECDSA P-256. Files are replaced atomically (temporary file, fsync,
// rename), keys with mode 0600. Creating or replacing files in a directory holds an
// exclusive lock on DIR/.certs.lock (flock on Unix), so nodes starting at the same
// time, in one process or several, agree on one CA instead of overwriting each
// other's.
//
// A CA that exists but cannot be used (unreadable, its key missing or not matching,
// not a CA) is an error, never silently replaced: other nodes and clients may
// already trust it. Only a CA that has expired, or whose certificate was never
// written (a crash during creation), is created anew. A node certificate, in
// contrast, is cheap and local: any problem with it simply gets it reissued.
//
// The package starts no goroutines and keeps no state between calls.
package certs
