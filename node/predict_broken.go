//go:build quicmq_broken_predict

package node

// proposeUnplaced, in the build tagged quicmq_broken_predict, has the leader a first
// publish was relayed to as its group's predicted leader (replpredict.go) propose it to
// that group at once, without waiting for the topic's placement: a prediction that lost
// its race then appends records to a group the topic is not placed on. Only for showing
// that TestFirstPublishRacesExplicitPlacement fails without the wait.
const proposeUnplaced = true
