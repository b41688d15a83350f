# Renders, for each node of a region, the node's configuration file (HCL, read by
# `quicmq node --config`) and the boot script that installs and starts it. No provider: the
# cloud modules pass the script as user data (AWS) or a startup script (GCP).
#
# Two ways to give nodes their TLS identity (docs/security.md): ca_key_pem hands every node the
# mesh CA key, and the node issues its own certificate at start (ca_dir); node_certs hands each
# node only its own pre-issued certificate and key (cert, key, ca_bundle), so a compromised
# node cannot mint node or client certificates. Exactly one is given: the outputs'
# preconditions say which is wrong.
locals {
  data_dir = "/var/lib/quicmq"
  ca_dir   = "${local.data_dir}/ca"
  cert_dir = "${local.data_dir}/certs" # node_certs: not DATA/tls, where a ca_dir node issues its own
  lan_join = [for n in var.nodes : "${n.private_ip}:${var.ports.gossip}"]

  # Whether, not which: the names and the mode are not secret, the PEMs are.
  with_ca_key     = nonsensitive(var.ca_key_pem != null && var.ca_key_pem != "")
  with_node_certs = nonsensitive(var.node_certs != null)
  cert_names      = local.with_node_certs ? nonsensitive(keys(var.node_certs)) : []
  missing_certs   = [for n in var.nodes : n.name if !contains(local.cert_names, n.name)]
  mode_problem = (
    local.with_ca_key && local.with_node_certs ? "give either ca_key_pem (every node issues its own certificate from the CA key) or node_certs (pre-issued node certificates, no CA key on the nodes), not both" :
    !local.with_ca_key && !local.with_node_certs ? "give ca_key_pem (every node issues its own certificate from the CA key) or node_certs (pre-issued node certificates from 'quicmq certs node', no CA key on the nodes)" :
    local.with_node_certs && length(local.missing_certs) > 0 ? "node_certs has no entry for node(s) ${join(", ", local.missing_certs)}: issue one per node with 'quicmq certs node --name NAME'" :
    ""
  )

  # Replication (docs/operations.md, a replicated region): the same on every node of the region.
  replicas         = coalesce(var.replicas, length(var.nodes) >= 3 ? 3 : 1)
  replicas_problem = local.replicas > length(var.nodes) ? "replicas = ${local.replicas} needs at least ${local.replicas} nodes in region ${var.region}, which has ${length(var.nodes)} (node_count): raise node_count or lower replicas" : ""

  configs = {
    for n in var.nodes : n.name => templatefile("${path.module}/templates/quicmq.hcl.tftpl", {
      data_dir        = local.data_dir
      ca_dir          = local.ca_dir
      cert_dir        = local.cert_dir
      node_certs      = local.with_node_certs
      region          = var.region
      name            = n.name
      listen          = "0.0.0.0:${var.ports.quic}"
      advertise       = "${n.public_ip}:${var.ports.quic}"
      metrics         = "${n.private_ip}:${var.ports.metrics}"
      gossip          = "${n.private_ip}:${var.ports.gossip}"
      wan             = "${n.private_ip}:${var.ports.wan}"
      wan_advertise   = "${n.public_ip}:${var.ports.wan}" # other regions dial the public address
      join            = [for a in local.lan_join : a if a != "${n.private_ip}:${var.ports.gossip}"]
      wan_join        = var.wan_join
      mirror          = var.mirror
      with_tokens     = nonsensitive(length(var.tokens) > 0) # whether, not which
      retention_age   = var.retention_age
      retention_bytes = var.retention_bytes
      max_payload     = var.max_payload
      log_level       = var.log_level
      admin_api       = var.admin_api
      replicas        = local.replicas
      raft_tick       = var.raft_tick == null ? "" : var.raft_tick
    })
  }

  unit = file("${path.module}/../../../deploy/quicmq.service")

  boot_scripts = {
    for n in var.nodes : n.name => templatefile("${path.module}/templates/boot.sh.tftpl", {
      binary_url    = var.binary_url
      binary_sha256 = var.binary_sha256
      config        = local.configs[n.name]
      unit          = local.unit
      ca_dir        = local.ca_dir
      cert_dir      = local.cert_dir
      ca_cert_pem   = var.ca_cert_pem
      # Only the mode's secrets reach the script: no CA key with node_certs, and only this
      # node's own certificate and key.
      ca_key_pem    = local.with_node_certs || var.ca_key_pem == null ? "" : var.ca_key_pem
      node_certs    = local.with_node_certs
      node_cert_pem = local.with_node_certs ? try(var.node_certs[n.name].cert_pem, "") : ""
      node_key_pem  = local.with_node_certs ? try(var.node_certs[n.name].key_pem, "") : ""
      gossip_key    = var.gossip_key
      tokens        = join("\n", var.tokens)
    })
  }
}
