//go:build quicmq_broken_move

package relocate

// movePromotesEarly, in the build tagged quicmq_broken_move, promotes a moving replica's
// learner and removes the old replica as soon as the learner is added, before it has caught
// up (move.go): the group is then left with one replica fewer that holds its log until the
// new one catches up. Only for showing that TestRemoveTwoNodesUnderLoad's checker fails
// without the wait.
const movePromotesEarly = true
