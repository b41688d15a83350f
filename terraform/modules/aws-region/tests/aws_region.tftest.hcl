# Planned against the real AWS provider schema (served offline by tools/tfstub).
variables {
  aws_region    = "eu-west-1"
  region        = "eu"
  node_count    = 2
  admin_cidrs   = ["192.0.2.0/24"]
  peer_cidrs    = ["203.0.113.7/32"]
  gossip_key    = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
  ca_cert_pem   = "ca"
  ca_key_pem    = "key"
  binary_url    = "https://example.com/quicmq"
  binary_sha256 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
}

run "firewall_and_nodes" {
  command = plan

  assert {
    condition     = length(aws_instance.node) == 2 && length(aws_eip.node) == 2 && length(aws_eip_association.node) == 2
    error_message = "want an instance, a static address and an association per node"
  }
  assert {
    condition     = aws_instance.node["eu-1"].private_ip == "10.40.1.10" && aws_instance.node["eu-2"].private_ip == "10.40.1.11"
    error_message = "nodes get fixed private addresses (their configuration names them)"
  }
  assert {
    condition     = alltrue([for r in aws_vpc_security_group_ingress_rule.node : r.ip_protocol == "udp" if r.from_port == 7400])
    error_message = "QUIC is UDP only"
  }
  assert {
    condition     = toset([for r in aws_vpc_security_group_ingress_rule.node : r.ip_protocol if r.from_port == 7947 && r.cidr_ipv4 == "203.0.113.7/32"]) == toset(["tcp", "udp"])
    error_message = "WAN gossip from peers needs TCP and UDP"
  }
  assert {
    condition     = toset([for r in aws_vpc_security_group_ingress_rule.node : r.ip_protocol if r.from_port == 7946]) == toset(["tcp", "udp"])
    error_message = "LAN gossip needs TCP and UDP"
  }
  assert {
    condition     = [for r in aws_vpc_security_group_ingress_rule.node : r.cidr_ipv4 if r.from_port == 9400] == ["192.0.2.0/24"]
    error_message = "metrics only from the admin range"
  }
  assert {
    condition     = alltrue([for r in aws_vpc_security_group_ingress_rule.node : r.cidr_ipv4 != "0.0.0.0/0" if r.from_port != 7400])
    error_message = "only the QUIC port is open to the world"
  }
  assert {
    condition     = aws_instance.node["eu-1"].metadata_options[0].http_tokens == "required" && aws_instance.node["eu-1"].root_block_device[0].encrypted
    error_message = "IMDSv2 only, encrypted volume"
  }
}

run "refuses_metrics_open_to_the_world" {
  command = plan
  variables {
    admin_cidrs = ["0.0.0.0/0"]
  }
  expect_failures = [var.admin_cidrs]
}

# node_certs instead of ca_key_pem: the user data carries the node's own certificate and key
# and no CA key. (The user data is gzipped, so the check reads the script it is made from.)
run "node_certs_keep_the_ca_key_off_the_nodes" {
  command = plan
  override_resource {
    target = aws_eip.node
    values = { public_ip = "198.51.100.30" }
  }
  variables {
    ca_key_pem = null
    node_certs = {
      "eu-1" = { cert_pem = "-----BEGIN CERTIFICATE-----\nN1-CERT\n-----END CERTIFICATE-----", key_pem = "-----BEGIN PRIVATE KEY-----\nN1-KEY\n-----END PRIVATE KEY-----" }
      "eu-2" = { cert_pem = "-----BEGIN CERTIFICATE-----\nN2-CERT\n-----END CERTIFICATE-----", key_pem = "-----BEGIN PRIVATE KEY-----\nN2-KEY\n-----END PRIVATE KEY-----" }
    }
  }
  assert {
    condition     = aws_instance.node["eu-1"].user_data_base64 == base64gzip(module.config.boot_scripts["eu-1"]) && strcontains(module.config.boot_scripts["eu-1"], "N1-KEY") && !strcontains(module.config.boot_scripts["eu-1"], "N2-")
    error_message = "each node's user data carries its own certificate and key"
  }
  assert {
    condition     = alltrue([for s in values(module.config.boot_scripts) : !strcontains(s, "cat > /var/lib/quicmq/ca/ca-key.pem") && strcontains(s, "ca_bundle = \"/var/lib/quicmq/certs/ca.pem\"")])
    error_message = "with node_certs no CA key reaches the user data; the configuration names cert, key and ca_bundle"
  }
}

# replicas and raft_tick reach every node's configuration, through the user data.
run "three_nodes_replicate" {
  command = plan
  override_resource {
    target = aws_eip.node
    values = { public_ip = "198.51.100.30" }
  }
  variables {
    node_count = 3
    raft_tick  = "100ms"
  }
  assert {
    condition     = length(aws_instance.node) == 3 && alltrue([for n, i in aws_instance.node : i.user_data_base64 == base64gzip(module.config.boot_scripts[n]) && strcontains(module.config.boot_scripts[n], "\nreplicas        = 3\nraft_tick       = \"100ms\"\n")])
    error_message = "3 nodes: every node's user data configures replicas = 3 (the default) and the raft_tick given"
  }
}
