#!/usr/bin/env bash
# Offline checks of terraform/ (issue 6): OpenTofu built from the Go module proxy, a stub
# provider serving the real AWS and Google schemas (tools/tfstub), then
#   tofu fmt -check; init + validate of every module and example; plan of every example;
#   tofu test of every module; the rendered node configuration through 'quicmq config check'
#   (with ca_key_pem, with node_certs, and of a replicated 3-node region; the messages refusing a
#   wrong choice of the two, and more replicas than nodes);
#   tflint (QUICMQ_TFLINT=0 skips it); and negative checks: a misspelt argument and a missing
#   required one must each make validate fail.
# Binaries are cached in $QUICMQ_CACHE (default $HOME/.cache/quicmq), keyed by the hash of
# the go.sum (and sources) they come from. Cold cost on 2 cores: ~10-13 min for tofu, ~1 min
# for the stub, ~5-7 min for tflint; warm: ~1.5 min for the checks alone.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${QUICMQ_CACHE:-$HOME/.cache/quicmq}
mkdir -p "$cache"
export PATH="$(go env GOPATH)/bin:$PATH"

hash_of() { cat "$@" | sha256sum | cut -c1-16; }

# OpenTofu: its go.mod has a replace directive, so it is built from our tools module.
tofu=$cache/tofu-$(hash_of "$root/tools/go.sum")/tofu
if [ ! -x "$tofu" ]; then
  echo "tofu-check: building OpenTofu (cold: ~10 min on 2 cores)"
  mkdir -p "$(dirname "$tofu")"
  (cd "$root/tools" && go build -trimpath -ldflags "-s -w -X github.com/opentofu/opentofu/version.dev=no" \
    -o "$tofu.tmp" github.com/opentofu/opentofu/cmd/tofu) && mv "$tofu.tmp" "$tofu"
fi
stub=$cache/tfstub-$(cd "$root/tools/tfstub" && hash_of go.sum *.go schemas/*)/terraform-provider-stub
if [ ! -x "$stub" ]; then
  echo "tofu-check: building the stub provider"
  mkdir -p "$(dirname "$stub")"
  (cd "$root/tools/tfstub" && go build -trimpath -o "$stub.tmp" .) && mv "$stub.tmp" "$stub"
fi
(cd "$root/tools/tfstub" && go vet ./... && go test -count=1 ./...) | sed 's/^/tfstub: /'
quicmq=$cache/quicmq-check
(cd "$root" && go build -o "$quicmq" ./cmd/quicmq)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A filesystem mirror with the stub under the real providers' names and versions.
for p in aws/6.25.0 google/6.50.0; do
  d=$work/mirror/registry.opentofu.org/hashicorp/${p%/*}/${p#*/}/linux_amd64
  mkdir -p "$d"
  cp "$stub" "$d/terraform-provider-${p%/*}_v${p#*/}"
done
cat > "$work/tofurc" <<CFG
provider_installation {
  filesystem_mirror {
    path    = "$work/mirror"
    include = ["registry.opentofu.org/hashicorp/*"]
  }
}
CFG
export TF_CLI_CONFIG_FILE=$work/tofurc TF_IN_AUTOMATION=1 CHECKPOINT_DISABLE=1
unset TF_PLUGIN_CACHE_DIR
# A copy, so that .terraform directories stay out of the tree; lock files hold the real
# providers' hashes, which the stub does not match.
mkdir -p "$work/repo"
cp -r "$root/terraform" "$root/deploy" "$work/repo/"
find "$work/repo" -name .terraform -prune -exec rm -rf {} + -o -name .terraform.lock.hcl -exec rm -f {} +
tf=$work/repo/terraform

# Values for the examples' plans: a throwaway CA and key (never used by anything).
cat > "$work/ci.tfvars" <<'VARS'
gossip_key    = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
ca_cert_pem   = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"
ca_key_pem    = "-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----"
tokens        = ["ci-token-0123456789abcdef"]
binary_url    = "https://example.com/quicmq-linux-amd64"
binary_sha256 = "0000000000000000000000000000000000000000000000000000000000000000"
admin_cidrs   = ["192.0.2.0/24"]
project       = "quicmq-ci"
VARS

fail=0
step() { echo "== $*"; }
run() { # run DIR CMD...: quiet unless it fails
  local dir=$1; shift
  if ! out=$(cd "$dir" && "$@" 2>&1); then
    echo "$out"
    echo "tofu-check: FAILED in ${dir#$work/repo/}: $*"
    fail=1
    return 1
  fi
}

step "tofu fmt -check"
run "$tf" "$tofu" fmt -check -recursive -diff

for d in "$tf"/modules/* "$tf"/examples/*; do
  step "init + validate ${d#$tf/}"
  run "$d" "$tofu" init -backend=false -input=false -no-color || continue
  run "$d" "$tofu" validate -no-color || continue
  case $d in
  */examples/*)
    step "plan ${d#$tf/}"
    # Values for variables an example does not declare only warn.
    run "$d" "$tofu" plan -refresh=false -input=false -no-color -lock=false -var-file="$work/ci.tfvars" &&
      grep -m1 '^Plan:' <<<"$out" | sed 's/^/   /'
    ;;
  */modules/*)
    if [ -d "$d/tests" ]; then
      step "tofu test ${d#$tf/}"
      run "$d" "$tofu" test -no-color && echo "$out" | tail -1 | sed 's/^/   /'
    fi
    ;;
  esac
done

step "plan examples/multi-cloud with node_certs instead of ca_key_pem"
pemv() { printf -- '{ cert_pem = "-----BEGIN CERTIFICATE-----\\n%s\\n-----END CERTIFICATE-----", key_pem = "-----BEGIN PRIVATE KEY-----\\n%s\\n-----END PRIVATE KEY-----" }' "$1" "$1"; }
{ grep -v '^ca_key_pem' "$work/ci.tfvars"
  echo "node_certs = {"; for r in us eu eu-gcp; do for i in 1 2 3; do echo "  $r-$i = $(pemv $r-$i)"; done; done; echo "}"; } > "$work/certs.tfvars"
run "$tf/examples/multi-cloud" "$tofu" plan -refresh=false -input=false -no-color -lock=false -var-file="$work/certs.tfvars" &&
  grep -m1 '^Plan:' <<<"$out" | sed 's/^/   /'

step "rendered configuration passes 'quicmq config check'"
render=$tf/render-check # inside the tree: modules read ../../deploy/quicmq.service
mkdir -p "$render/etc"
printf '%s\n' MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY= > "$render/etc/gossip.key"
printf '%s\n' ci-token-0123456789abcdef > "$render/etc/tokens"
cat > "$render/main.tf" <<TF
module "config" {
  source        = "../modules/config"
  region        = "eu"
  nodes         = [{ name = "eu-1", private_ip = "10.0.1.10", public_ip = "198.51.100.10" }, { name = "eu-2", private_ip = "10.0.1.11", public_ip = "198.51.100.11" }]
  wan_join      = ["203.0.113.1:7947"]
  gossip_key    = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
  ca_cert_pem   = "x"
  ca_key_pem    = "x"
  tokens        = ["ci-token-0123456789abcdef"]
  mirror        = ["audit.>"]
  binary_url    = "https://example.com/quicmq"
  binary_sha256 = "0000000000000000000000000000000000000000000000000000000000000000"
}
output "eu_1" { value = module.config.configs["eu-1"] }
output "eu_2" { value = module.config.configs["eu-2"] }
output "boot" {
  value     = module.config.boot_scripts["eu-1"]
  sensitive = true
}
TF
if run "$render" "$tofu" init -backend=false -input=false -no-color &&
  run "$render" "$tofu" apply -auto-approve -input=false -no-color -lock=false; then
  for n in eu_1 eu_2; do
    (cd "$render" && "$tofu" output -raw $n) | sed "s#/etc/quicmq/#$render/etc/#g" > "$render/$n.hcl"
    run "$render" "$quicmq" config check "$render/$n.hcl" && echo "   ${out#$render/}"
  done
  (cd "$render" && "$tofu" output -raw boot) > "$render/boot.sh"
  run "$render" bash -n "$render/boot.sh"
  grep -q 'sha256sum --check --strict' "$render/boot.sh" || { echo "tofu-check: boot script lacks the checksum"; fail=1; }
fi

# The same with node_certs (pre-issued certificates, no CA key on the nodes), and the
# messages that refuse a wrong choice between ca_key_pem and node_certs.
pem() { printf -- '-----BEGIN %s-----\\n%s\\n-----END %s-----' "$1" "$2" "$1"; }
certs="{ eu-1 = { cert_pem = \"$(pem CERTIFICATE eu-1)\", key_pem = \"$(pem 'PRIVATE KEY' eu-1-key)\" }, eu-2 = { cert_pem = \"$(pem CERTIFICATE eu-2)\", key_pem = \"$(pem 'PRIVATE KEY' eu-2-key)\" } }"
render_mode() { # render_mode NAME LINES: the render-check module, its CA key line replaced
  rm -rf "$render-$1" && mkdir -p "$render-$1" && cp -r "$render/etc" "$render-$1/"
  local l
  while IFS= read -r l; do
    if [ "$l" = '  ca_key_pem    = "x"' ]; then printf '%s\n' "$2"; else printf '%s\n' "$l"; fi
  done < "$render/main.tf" > "$render-$1/main.tf"
}
render_mode certs "  node_certs    = $certs"
if run "$render-certs" "$tofu" init -backend=false -input=false -no-color &&
  run "$render-certs" "$tofu" apply -auto-approve -input=false -no-color -lock=false; then
  (cd "$render-certs" && "$tofu" output -raw eu_1) | sed "s#/etc/quicmq/#$render-certs/etc/#g" > "$render-certs/eu_1.hcl"
  run "$render-certs" "$quicmq" config check --no-files "$render-certs/eu_1.hcl" && echo "   node_certs: ${out#$render-certs/}"
  grep -q '^ca_bundle = "/var/lib/quicmq/certs/ca.pem"' "$render-certs/eu_1.hcl" || { echo "tofu-check: node_certs config lacks ca_bundle"; fail=1; }
  (cd "$render-certs" && "$tofu" output -raw boot) > "$render-certs/boot.sh"
  run "$render-certs" bash -n "$render-certs/boot.sh"
  if grep -q 'ca-key.pem <<' "$render-certs/boot.sh" || ! grep -q 'eu-1-key' "$render-certs/boot.sh"; then
    echo "tofu-check: node_certs boot script must carry the node key and no CA key"; fail=1
  fi
fi
refused() { # refused NAME LINES EXPECT: plan must fail, saying EXPECT
  render_mode "$1" "$2"
  (cd "$render-$1" && "$tofu" init -backend=false -input=false -no-color >/dev/null 2>&1) || true
  local out
  if out=$(cd "$render-$1" && "$tofu" plan -input=false -no-color -lock=false 2>&1); then
    echo "tofu-check: FAILED: $1 was not refused"; fail=1
  elif ! tr -s '\n│ ' ' ' <<<"$out" | grep -q "$3"; then
    echo "$out"; echo "tofu-check: FAILED: $1 refused for another reason"; fail=1
  else
    echo "   refused: $1 ($3)"
  fi
}
refused both-modes "  ca_key_pem    = \"x\"
  node_certs    = $certs" "give either ca_key_pem .* not both"
refused no-mode "" "give ca_key_pem .* or node_certs"
refused missing-cert "  node_certs    = { eu-1 = { cert_pem = \"$(pem CERTIFICATE eu-1)\", key_pem = \"$(pem 'PRIVATE KEY' k)\" } }" "node_certs has no entry for node(s) eu-2"
refused too-few-nodes "  ca_key_pem    = \"x\"
  replicas      = 3" "replicas = 3 needs at least 3 nodes in region eu, which has 2"
rm -rf "$render"-*

# A replicated region: 3 nodes, replicas = 3 by default, and a raft_tick.
mkdir -p "$render-r3" && cp -r "$render/etc" "$render-r3/"
sed -e 's/^  nodes         = \[\(.*\)\]$/  nodes         = [\1, { name = "eu-3", private_ip = "10.0.1.12", public_ip = "198.51.100.12" }]\n  raft_tick     = "100ms"/' \
  -e 's/^output "eu_2" { value = module.config.configs\["eu-2"\] }$/output "eu_3" { value = module.config.configs["eu-3"] }/' "$render/main.tf" > "$render-r3/main.tf"
if run "$render-r3" "$tofu" init -backend=false -input=false -no-color &&
  run "$render-r3" "$tofu" apply -auto-approve -input=false -no-color -lock=false; then
  (cd "$render-r3" && "$tofu" output -raw eu_3) | sed "s#/etc/quicmq/#$render-r3/etc/#g" > "$render-r3/eu_3.hcl"
  run "$render-r3" "$quicmq" config check "$render-r3/eu_3.hcl" && echo "   replicated: ${out#$render-r3/}"
  grep -qx 'replicas        = 3' "$render-r3/eu_3.hcl" && grep -qx 'raft_tick       = "100ms"' "$render-r3/eu_3.hcl" ||
    { echo "tofu-check: a 3-node region's config lacks replicas = 3 or raft_tick"; fail=1; }
fi
rm -rf "$render-r3"

step "negative checks: broken arguments must fail validate"
neg() { # neg NAME FILE SED EXPECT
  local name=$1 file=$2 expr=$3 expect=$4
  rm -rf "$work/neg" && mkdir -p "$work/neg" && cp -r "$work/repo/terraform" "$work/repo/deploy" "$work/neg/"
  find "$work/neg" -name .terraform -prune -exec rm -rf {} +
  sed -i "$expr" "$work/neg/terraform/$file"
  local d=$work/neg/terraform/examples/multi-cloud
  local out
  (cd "$d" && "$tofu" init -backend=false -input=false -no-color >/dev/null 2>&1) || true
  if out=$(cd "$d" && "$tofu" validate -no-color 2>&1); then
    echo "tofu-check: FAILED: $name was not caught"; fail=1
  elif ! grep -q "$expect" <<<"$out"; then
    echo "$out"; echo "tofu-check: FAILED: $name failed for another reason"; fail=1
  else
    echo "   caught: $name ($(grep -m1 "$expect" <<<"$out" | sed 's/^[│ ]*//'))"
  fi
}
neg "misspelt aws_instance argument" modules/aws-region/main.tf 's/^  instance_type          = var.instance_type/  instance_typo          = var.instance_type/' 'Unsupported argument'
neg "missing required google_compute_instance argument" modules/gcp-region/main.tf '/^  machine_type = var.machine_type/d' 'Missing required argument'
neg "misspelt firewall block" modules/gcp-region/main.tf '0,/^  allow {/s//  allowed {/' 'Unsupported block type'

if [ "${QUICMQ_TFLINT:-1}" = 1 ]; then
  tflint=$cache/tflint-v0.64.0/tflint
  if [ ! -x "$tflint" ]; then
    echo "tofu-check: building tflint v0.64.0 (cold: ~4 min)"
    GOBIN=$(dirname "$tflint") go install github.com/terraform-linters/tflint@v0.64.0
  fi
  for d in "$tf"/modules/* "$tf"/examples/*; do
    step "tflint ${d#$tf/}"
    run "$d" "$tflint" --config "$tf/.tflint.hcl" --no-color
  done
fi

if [ $fail != 0 ]; then
  echo "tofu-check: FAILED"
  exit 1
fi
echo "tofu-check: ok"
