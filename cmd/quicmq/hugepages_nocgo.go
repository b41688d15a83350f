//go:build !cgo

package main

// cgoMalloc: without cgo, Pebble allocates on the Go heap; glibc's tunable would do nothing.
const cgoMalloc = false
