//go:build cgo

package main

// cgoMalloc: Pebble's manual memory comes from glibc's calloc (its cgo build).
const cgoMalloc = true
