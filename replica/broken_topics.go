//go:build quicmq_broken_topics

package replica

// crossTopics is set only in a binary built with -tags quicmq_broken_topics: an append
// entry is then applied to another topic of its group (the first by name that the group
// has applied), the same way on every replica, so that the simulation of groups holding
// several topics (TestSimRegionWalManyTopics) can be shown to catch a state machine that
// mixes its topics' logs. No release is built with the tag.
const crossTopics = true
