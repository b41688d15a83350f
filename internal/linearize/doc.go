// Package linearize judges the histories of the replicated-region campaigns
// (docs/reliability.md, "Replicated region"): every publish a campaign's
// producers made (invoked, then acknowledged at an offset, refused, or never
// answered) and every read of a topic's log from offset 0, checked for
// linearizability against a model of an append-only log per topic with
// github.com/anishathalye/porcupine, plus the checks porcupine cannot make:
// internal/campaign's judge (nothing acknowledged lost, nothing stored twice,
// dense offsets), every replica's log identical, no record served that the
// final agreed log does not hold at that offset, and a retried publish always
// answered with its original offset.
//
// The model's state is the sequence of (producer, sequence) keys of a
// topic's log. A publish acknowledged at offset O is legal only when the log
// has O records and the key is not among them, or when the key is already at
// O (an idempotent retry). A refused publish stored nothing: it is left out of
// porcupine's history, and a refused key found in the log is reported. A
// publish never answered may or may not have taken effect, at most once per
// key. A read is legal only when it observed exactly the log at some moment
// between its invocation and its return.
//
// Checking is NP-complete in the history's length, so the history is
// partitioned by topic, each topic's history is bounded (Config.MaxOps) and
// checked with a timeout; a topic not decided in time is reported as unknown,
// never as passed. Three deductions from the final reads (the campaign's
// reads of every replica's whole log once it is quiet, the last operations of
// the history) keep the search small without changing the verdict:
//
//   - an unanswered publish whose key is in no final read can only be
//     linearized after them, where it changes nothing observed: it is left out;
//   - an unanswered publish whose key was stored took effect, if at all,
//     before the first acknowledgement of its key (or before the final read
//     that shows it): that is its return time instead of "never";
//   - it can only have taken effect at the offset the final reads show its
//     key at: the model refuses it anywhere else.
//
// On a violation the checker writes porcupine's HTML visualization of the
// topic's history to a file and names it in the report.
//
// It is pure and needs no processes, so its unit tests feed it hand-written
// histories, valid and broken, and show it failing on each broken kind.
package linearize
