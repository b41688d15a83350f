# Renders, for each node of a region, the node's configuration file (HCL, read by
# `quicmq node --config`) and the boot script that installs and starts it. No provider: the
# cloud modules pass the script as user data (AWS) or a startup script (GCP).
locals {
  data_dir = "/var/lib/quicmq"
  ca_dir   = "${local.data_dir}/ca"
  lan_join = [for n in var.nodes : "${n.private_ip}:${var.ports.gossip}"]

  configs = {
    for n in var.nodes : n.name => templatefile("${path.module}/templates/quicmq.hcl.tftpl", {
      data_dir        = local.data_dir
      ca_dir          = local.ca_dir
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
      ca_cert_pem   = var.ca_cert_pem
      ca_key_pem    = var.ca_key_pem
      gossip_key    = var.gossip_key
      tokens        = join("\n", var.tokens)
    })
  }
}
