// Package release is the list of QuicMQ's named releases, kept in the file RELEASES beside
// this package and embedded in every build: `quicmq version` names the release a binary is
// (or follows), and the rolling-upgrade campaign builds the previous release from the
// repository's own history. The file, not git tags, is the source of truth: a clone may carry
// no tags. A release is added to the file by a commit after the one it names.
package release
