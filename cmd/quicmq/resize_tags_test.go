//go:build !quicmq_broken_move

package main

// moveBuildTags are the build tags the resizing campaigns build their node processes with
// (resize_campaign_test.go): none here; quicmq_broken_move in the build that shows their
// checks failing.
const moveBuildTags = ""
