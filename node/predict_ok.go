//go:build !quicmq_broken_predict

package node

// proposeUnplaced is true only in the build that shows the prediction's checker failing
// (predict_broken.go).
const proposeUnplaced = false
