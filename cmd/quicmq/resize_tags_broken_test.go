//go:build quicmq_broken_move

package main

// moveBuildTags: run with -tags quicmq_broken_move, the resizing campaigns run node
// processes of that build (node/move_broken.go: a move promotes its new replica and removes
// the old one before the new one has caught up), which their checks must fail.
const moveBuildTags = "quicmq_broken_move"
