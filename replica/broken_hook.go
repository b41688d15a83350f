package replica

// brokenAckBuild is true only in a binary built with -tags
// quicmq_broken_ack (broken_ack.go): a group's leader then applies and
// answers proposals as soon as its own log has them synced, before a quorum
// does (followers still apply only what commits), as
// Config.brokenApplyBeforeCommit does on every replica in the simulation. It exists
// so that the replicated-region campaigns (cmd/quicmq,
// campaign_replica_broken_test.go) can show their checker failing on real
// processes; no release is built with the tag.
var brokenAckBuild bool
