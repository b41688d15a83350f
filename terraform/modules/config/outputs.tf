output "configs" {
  description = "Each node's /etc/quicmq/quicmq.hcl, by node name."
  value       = local.configs
  precondition {
    condition     = local.mode_problem == ""
    error_message = "config: ${local.mode_problem}."
  }
  precondition {
    condition     = local.replicas_problem == ""
    error_message = "config: ${local.replicas_problem}."
  }
}

output "boot_scripts" {
  description = "Each node's boot script (cloud-init user data or GCE startup script), by node name. Holds the secrets."
  value       = local.boot_scripts
  sensitive   = true
  precondition {
    condition     = local.mode_problem == ""
    error_message = "config: ${local.mode_problem}."
  }
  precondition {
    condition     = local.replicas_problem == ""
    error_message = "config: ${local.replicas_problem}."
  }
}

output "quic_addresses" {
  description = "Client addresses (UDP) of the nodes."
  value       = [for n in var.nodes : "${n.public_ip}:${var.ports.quic}"]
}

output "wan_addresses" {
  description = "WAN gossip addresses of the nodes: what other regions put in wan_join."
  value       = [for n in var.nodes : "${n.public_ip}:${var.ports.wan}"]
}

output "metrics_endpoints" {
  description = "Prometheus scrape targets (reachable from the admin range only)."
  value       = [for n in var.nodes : "http://${n.private_ip}:${var.ports.metrics}/metrics"]
}
