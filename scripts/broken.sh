#!/usr/bin/env bash
# make broken: every deliberately broken build, each against the checker that must catch it.
# A checker that passes on its broken build proves nothing, so this exits 1 when one does.
# The list is here, in one place: a new broken build gets a line (tag, what it breaks, the
# command that must fail); tags given as arguments run only those lines. Runs on demand
# (minutes per line), not in CI's make test.
set -u
cd "$(dirname "$0")/.."

# Besides these tags, replica.Config's broken* fields break the replica simulation in-process,
# and its tests assert each is caught (TestSimCatchesApplyBeforeCommit, ...MissingSync,
# ...SnapshotWithoutRecords) in every go test run; and the protocol's conformance suite is
# shown failing in docs/reliability.md.
#
# tag | what the build breaks | the check that must fail (run from the repository root)
builds=(
  "quicmq_broken_ack|a raft leader acknowledges a publish once its own log has it, before a quorum|go test -count=1 -tags quicmq_broken_ack -timeout 10m -run ^TestSimRegion\$ ./replica"
  "quicmq_broken_group|a consumer group's state is stored on the serving node only, not replicated|go test -count=1 -tags quicmq_broken_group -timeout 10m -run ^TestReplicatedGroupLeaderLoss\$ ./node"
  "quicmq_broken_mpos|a set position entry drops its vector: nothing of a durable is mirrored|go test -count=1 -tags quicmq_broken_mpos -timeout 10m -run ^TestReplicatedFailoverExactlyOnceAcrossRegions\$ ./node"
  "quicmq_broken_retain|a snapshot's installation ignores the log start it carries|go test -count=1 -tags quicmq_broken_retain -timeout 10m -run ^TestReplicatedRejoinAfterCuts\$ ./node"
  "quicmq_broken_topics|a group's append is applied to another topic of the group|go test -count=1 -tags quicmq_broken_topics -timeout 10m -run ^TestSimRegionWalManyTopics\$ ./replica"
  "quicmq_broken_reroute|a publish a leadership move refused is routed again without waiting for its topic's earlier batches in flight elsewhere|go test -count=1 -tags quicmq_broken_reroute -timeout 10m -run ^TestDrainUnderPipelinedPublishingRefusesNothing\$ ./node"
  "quicmq_broken_gvec|groups ignore the states of them mirrored from other regions|go test -count=1 -tags quicmq_broken_gvec -timeout 10m -run ^TestGroupFailoverRestartedMemberResumesFromMirroredState\$ ./node"
  "quicmq_broken_move|a replica move promotes its learner and removes the old replica before the learner has caught up|go test -count=1 -tags quicmq_broken_move -timeout 10m -run ^TestRemoveTwoNodesUnderLoad\$ ./node"
  "quicmq_broken_move|the same build, as node processes in the move-faults campaign (3 runs)|env QUICMQ_MOVE_FAULTS_CAMPAIGN=1 QUICMQ_MOVE_FAULTS_RUNS=1 QUICMQ_MOVE_FAULTS_TOPICS=50 QUICMQ_MOVE_FAULTS_RATE=300 go test -count=1 -tags quicmq_broken_move -timeout 15m -run ^TestMoveFaultsCampaign\$ ./cmd/quicmq"
  "quicmq_broken_mirrorskip|a mirror drops one record in 500 it receives (its cursor moves past it)|env QUICMQ_MIRROR_LOAD_CAMPAIGN=1 QUICMQ_MIRROR_LOAD_FAULTS=kill-eu go test -count=1 -tags quicmq_broken_mirrorskip -timeout 15m -run ^TestMirrorLoadCampaign\$ ./cmd/quicmq"
  "quicmq_broken_predict|the leader a new topic's first publish is relayed to as its group's predicted leader proposes it before the topic's placement is read|go test -count=1 -tags quicmq_broken_predict -timeout 10m -run ^TestFirstPublishRacesExplicitPlacement\$ ./node"
  "quicmq_broken_offsets|a leader assigns a publish's offsets when it proposes it (a counter of its own), not at apply|go test -count=1 -tags quicmq_broken_offsets -timeout 10m -run ^TestSimRegionWalManyTopics\$ ./replica"
)

# Tags given as arguments run only their lines: ./scripts/broken.sh quicmq_broken_offsets
if [ $# -gt 0 ]; then
  only=() found=0
  for tag in "$@"; do
    n=${#only[@]}
    for b in "${builds[@]}"; do
      [ "${b%%|*}" = "$tag" ] && only+=("$b")
    done
    [ ${#only[@]} -gt "$n" ] && found=$((found + 1))
  done
  # A tag may have several lines (its build against several checks).
  if [ "$found" -ne $# ]; then
    echo "unknown tag among: $* (the tags: $(for b in "${builds[@]}"; do printf '%s ' "${b%%|*}"; done))" >&2
    exit 2
  fi
  builds=("${only[@]}")
fi

caught=0 missed=()
for b in "${builds[@]}"; do
  IFS='|' read -r tag what cmd <<<"$b"
  echo "== $tag: $what"
  echo "   $cmd (must fail)"
  log=$(mktemp)
  start=$(date +%s)
  if $cmd >"$log" 2>&1; then
    echo "   NOT CAUGHT: the check passed on the broken build ($(( $(date +%s) - start )) s); its output: $log"
    missed+=("$tag")
  else
    # The first line of the first failure: what the check saw.
    echo "   caught in $(( $(date +%s) - start )) s: $(grep -A1 -m1 -E '^\s*--- FAIL' "$log" | tail -1 | sed 's/^\s*//' | cut -c1-160)"
    caught=$((caught + 1))
    rm -f "$log"
  fi
done
echo "$caught of ${#builds[@]} broken builds caught"
if [ ${#missed[@]} -gt 0 ]; then
  echo "not caught: ${missed[*]}"
  exit 1
fi
