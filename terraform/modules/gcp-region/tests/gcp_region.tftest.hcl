# Planned against the real Google provider schema (served offline by tools/tfstub).
variables {
  project       = "quicmq-test"
  gcp_region    = "europe-west1"
  zone          = "europe-west1-b"
  region        = "eu-gcp"
  node_count    = 2
  admin_cidrs   = ["192.0.2.0/24"]
  peer_cidrs    = ["203.0.113.7/32", "203.0.113.8/32"]
  gossip_key    = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
  ca_cert_pem   = "ca"
  ca_key_pem    = "key"
  binary_url    = "https://example.com/quicmq"
  binary_sha256 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
}

run "firewall_and_nodes" {
  command = plan

  assert {
    condition     = length(google_compute_instance.node) == 2 && length(google_compute_address.node) == 2
    error_message = "want an instance and a static address per node"
  }
  assert {
    condition     = google_compute_instance.node["eu-gcp-2"].network_interface[0].network_ip == "10.50.1.11"
    error_message = "nodes get fixed internal addresses"
  }
  assert {
    condition     = [for a in google_compute_firewall.quic_clients.allow : a.protocol] == ["udp"]
    error_message = "clients reach QUIC over UDP only"
  }
  assert {
    condition     = toset([for a in google_compute_firewall.peers[0].allow : a.protocol]) == toset(["tcp", "udp"]) && google_compute_firewall.peers[0].source_ranges == toset(var.peer_cidrs)
    error_message = "peers reach WAN gossip over TCP and UDP, from their /32s only"
  }
  assert {
    condition     = google_compute_firewall.admin.source_ranges == toset(["192.0.2.0/24"]) && contains(one(google_compute_firewall.admin.allow).ports, "9400")
    error_message = "metrics only from the admin range"
  }
  assert {
    condition     = google_compute_instance.node["eu-gcp-1"].tags == toset(["quicmq-eu-gcp"]) && google_compute_firewall.admin.target_tags == toset(["quicmq-eu-gcp"])
    error_message = "the firewall rules target the nodes' tag"
  }
}

run "no_peers_no_peer_rule" {
  command = plan
  variables {
    peer_cidrs = []
  }
  assert {
    condition     = length(google_compute_firewall.peers) == 0
    error_message = "no peer rule without peers"
  }
}

# node_certs instead of ca_key_pem: the startup script (instance metadata) carries the node's
# own certificate and key and no CA key.
run "node_certs_keep_the_ca_key_off_the_nodes" {
  command = plan
  override_resource {
    target = google_compute_address.node
    values = { address = "198.51.100.20" }
  }
  variables {
    ca_key_pem = null
    node_certs = {
      "eu-gcp-1" = { cert_pem = "-----BEGIN CERTIFICATE-----\nN1-CERT\n-----END CERTIFICATE-----", key_pem = "-----BEGIN PRIVATE KEY-----\nN1-KEY\n-----END PRIVATE KEY-----" }
      "eu-gcp-2" = { cert_pem = "-----BEGIN CERTIFICATE-----\nN2-CERT\n-----END CERTIFICATE-----", key_pem = "-----BEGIN PRIVATE KEY-----\nN2-KEY\n-----END PRIVATE KEY-----" }
    }
  }
  assert {
    condition     = strcontains(google_compute_instance.node["eu-gcp-2"].metadata_startup_script, "N2-KEY") && strcontains(google_compute_instance.node["eu-gcp-2"].metadata_startup_script, "cert      = \"/var/lib/quicmq/certs/node.pem\"") && !strcontains(google_compute_instance.node["eu-gcp-2"].metadata_startup_script, "N1-")
    error_message = "each node's startup script carries its own certificate and key, and its configuration names them"
  }
  assert {
    condition     = alltrue([for i in google_compute_instance.node : !strcontains(i.metadata_startup_script, "cat > /var/lib/quicmq/ca/ca-key.pem") && !strcontains(i.metadata_startup_script, "ca_dir")])
    error_message = "with node_certs no CA key reaches the instance metadata"
  }
}

# replicas and raft_tick reach every node's configuration, through the startup script.
run "three_nodes_replicate" {
  command = plan
  override_resource {
    target = google_compute_address.node
    values = { address = "198.51.100.20" }
  }
  variables {
    node_count = 3
    raft_tick  = "100ms"
  }
  assert {
    condition     = length(google_compute_instance.node) == 3 && alltrue([for i in google_compute_instance.node : strcontains(i.metadata_startup_script, "\nreplicas        = 3\nraft_tick       = \"100ms\"\n")])
    error_message = "3 nodes: every node's startup script configures replicas = 3 (the default) and the raft_tick given"
  }
}
