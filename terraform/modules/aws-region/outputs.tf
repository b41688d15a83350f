output "node_addresses" {
  description = "Per node: public (static) and private address."
  value       = { for n in local.names : n => { public_ip = aws_eip.node[n].public_ip, private_ip = local.private_ips[n] } }
}

output "quic_addresses" {
  description = "Client addresses (UDP)."
  value       = module.config.quic_addresses
}

output "wan_join" {
  description = "WAN gossip addresses of this region's nodes, for the other regions' wan_join."
  value       = module.config.wan_addresses
}

output "peer_cidrs" {
  description = "This region's node addresses as /32s, for the other regions' peer_cidrs."
  value       = [for n in local.names : "${aws_eip.node[n].public_ip}/32"]
}

output "metrics_endpoints" {
  description = "Prometheus scrape targets (from the admin range)."
  value       = module.config.metrics_endpoints
}

output "security_group_id" {
  description = "The nodes' security group."
  value       = aws_security_group.node.id
}
