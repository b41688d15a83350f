//go:build !quicmq_broken_move

package relocate

// movePromotesEarly is true only in the build that shows the move checker failing
// (move_broken.go).
const movePromotesEarly = false
