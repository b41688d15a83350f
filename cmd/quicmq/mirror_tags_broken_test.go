//go:build quicmq_broken_mirrorskip

package main

// mirrorBuildTags: run with -tags quicmq_broken_mirrorskip, TestMirrorLoadCampaign runs node
// processes of that build (federation/mirrorskip_broken.go: a mirror drops one record in
// 500 it receives), which its check must fail.
const mirrorBuildTags = "quicmq_broken_mirrorskip"
