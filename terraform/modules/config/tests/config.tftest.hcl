# modules/config renders each node's configuration and boot script; no provider involved.
variables {
  region = "eu"
  nodes = [
    { name = "eu-1", private_ip = "10.0.1.10", public_ip = "198.51.100.10" },
    { name = "eu-2", private_ip = "10.0.1.11", public_ip = "198.51.100.11" },
  ]
  wan_join      = ["203.0.113.1:7947"]
  gossip_key    = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
  ca_cert_pem   = "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----"
  ca_key_pem    = "-----BEGIN PRIVATE KEY-----\nCA-KEY\n-----END PRIVATE KEY-----"
  tokens        = ["test-token-0123456789"]
  mirror        = ["audit.>"]
  binary_url    = "https://example.com/quicmq"
  binary_sha256 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
}

run "renders_each_node" {
  command = plan

  assert {
    condition     = length(output.configs) == 2 && length(output.boot_scripts) == 2
    error_message = "want a configuration and a boot script per node"
  }
  assert {
    condition     = strcontains(output.configs["eu-1"], "advertise = \"198.51.100.10:7400\"") && strcontains(output.configs["eu-1"], "gossip          = \"10.0.1.10:7946\"")
    error_message = "eu-1 must advertise its public address and gossip on its private one"
  }
  assert {
    condition     = strcontains(output.configs["eu-1"], "join            = [\"10.0.1.11:7946\"]")
    error_message = "a node joins the region's other nodes, not itself"
  }
  assert {
    condition     = strcontains(output.configs["eu-2"], "wan_join        = [\"203.0.113.1:7947\"]")
    error_message = "wan_join must reach the configuration"
  }
  assert {
    condition     = strcontains(output.configs["eu-2"], "wan_advertise   = \"${var.nodes[1].public_ip}:7947\"")
    error_message = "other regions must be told the public WAN gossip address"
  }
  assert {
    condition     = strcontains(output.configs["eu-1"], "token_file      = \"/etc/quicmq/tokens\"") && !strcontains(output.configs["eu-1"], var.gossip_key)
    error_message = "secrets stay in their own files, not in the configuration"
  }
  assert {
    condition     = strcontains(output.boot_scripts["eu-1"], "echo '${var.binary_sha256}  '\"$tmp\" | sha256sum --check --strict -")
    error_message = "the boot script must check the binary's SHA-256"
  }
  assert {
    condition     = strcontains(output.boot_scripts["eu-1"], "NoNewPrivileges=yes") && strcontains(output.boot_scripts["eu-1"], "ExecStart=/usr/local/bin/quicmq node --config /etc/quicmq/quicmq.hcl")
    error_message = "the boot script must install deploy/quicmq.service"
  }
  assert {
    condition     = output.wan_addresses == ["198.51.100.10:7947", "198.51.100.11:7947"]
    error_message = "wan_addresses: the public addresses on the WAN port"
  }
  assert {
    condition     = output.metrics_endpoints == ["http://10.0.1.10:9400/metrics", "http://10.0.1.11:9400/metrics"]
    error_message = "metrics: private addresses only"
  }
  assert {
    condition     = !strcontains(output.configs["eu-1"], "admin_api")
    error_message = "the admin API's state-changing endpoints are off unless admin_api is set"
  }
}

run "no_tokens_no_token_file" {
  command = plan
  variables {
    tokens = []
  }
  assert {
    condition     = !strcontains(output.configs["eu-1"], "token_file")
    error_message = "without tokens the configuration must not name a token file"
  }
}

run "refuses_a_bad_checksum" {
  command = plan
  variables {
    binary_sha256 = "latest"
  }
  expect_failures = [var.binary_sha256]
}

run "refuses_a_bad_gossip_key" {
  command = plan
  variables {
    gossip_key = "c2hvcnQ="
  }
  expect_failures = [var.gossip_key]
}

run "refuses_a_bad_region_name" {
  command = plan
  variables {
    region = "eu west"
  }
  expect_failures = [var.region]
}

run "ca_key_by_default" {
  command = plan

  assert {
    condition     = alltrue([for c in values(output.configs) : strcontains(c, "ca_dir    = \"/var/lib/quicmq/ca\"") && !strcontains(c, "ca_bundle") && !strcontains(c, "cert      =")])
    error_message = "with ca_key_pem a node issues its own certificate from ca_dir"
  }
  assert {
    condition     = strcontains(output.boot_scripts["eu-1"], "cat > /var/lib/quicmq/ca/ca-key.pem <<'QUICMQ_EOF'\n${var.ca_key_pem}\nQUICMQ_EOF") && strcontains(output.boot_scripts["eu-1"], "chmod 0600 /var/lib/quicmq/ca/ca-key.pem")
    error_message = "with ca_key_pem the boot script writes the CA key, mode 0600"
  }
}

# node_certs: each node gets only its own pre-issued certificate and key, never the CA key.
run "node_certs_without_the_ca_key" {
  command = plan
  variables {
    ca_key_pem = null
    node_certs = {
      "eu-1" = { cert_pem = "-----BEGIN CERTIFICATE-----\nEU1-CERT\n-----END CERTIFICATE-----", key_pem = "-----BEGIN PRIVATE KEY-----\nEU1-KEY\n-----END PRIVATE KEY-----" }
      "eu-2" = { cert_pem = "-----BEGIN CERTIFICATE-----\nEU2-CERT\n-----END CERTIFICATE-----", key_pem = "-----BEGIN EC PRIVATE KEY-----\nEU2-KEY\n-----END EC PRIVATE KEY-----" }
      # Another region's node: ignored (a mesh-wide map may be passed to every region).
      "us-1" = { cert_pem = "-----BEGIN CERTIFICATE-----\nUS1-CERT\n-----END CERTIFICATE-----", key_pem = "-----BEGIN PRIVATE KEY-----\nUS1-KEY\n-----END PRIVATE KEY-----" }
    }
  }

  assert {
    condition = alltrue([for c in values(output.configs) : strcontains(c, <<-EOT
      cert      = "/var/lib/quicmq/certs/node.pem"
      key       = "/var/lib/quicmq/certs/node-key.pem"
      ca_bundle = "/var/lib/quicmq/certs/ca.pem"
      EOT
    ) && !strcontains(c, "ca_dir")])
    error_message = "with node_certs the configuration names cert, key and ca_bundle, and no ca_dir"
  }
  assert {
    condition     = alltrue([for s in values(output.boot_scripts) : !strcontains(s, "CA-KEY") && !strcontains(s, "cat > /var/lib/quicmq/ca/ca-key.pem") && !strcontains(s, "US1-")])
    error_message = "with node_certs no CA key (and no other node's key) may reach a boot script"
  }
  assert {
    condition     = strcontains(output.boot_scripts["eu-2"], "cat > /var/lib/quicmq/certs/node-key.pem <<'QUICMQ_EOF'\n${var.node_certs["eu-2"].key_pem}\nQUICMQ_EOF") && strcontains(output.boot_scripts["eu-2"], "cat > /var/lib/quicmq/certs/node.pem <<'QUICMQ_EOF'\n${var.node_certs["eu-2"].cert_pem}\nQUICMQ_EOF") && !strcontains(output.boot_scripts["eu-2"], "EU1-")
    error_message = "each boot script writes its own node's certificate and key, not another node's"
  }
  assert {
    condition     = strcontains(output.boot_scripts["eu-1"], "cat > /var/lib/quicmq/certs/ca.pem <<'QUICMQ_EOF'\n${var.ca_cert_pem}\nQUICMQ_EOF")
    error_message = "the boot script writes ca_cert_pem as the trusted bundle"
  }
  assert {
    condition     = strcontains(output.boot_scripts["eu-1"], "chown quicmq:quicmq /var/lib/quicmq/certs/ca.pem /var/lib/quicmq/certs/node.pem /var/lib/quicmq/certs/node-key.pem\nchmod 0600 /var/lib/quicmq/certs/node-key.pem\n")
    error_message = "the node key belongs to quicmq, mode 0600"
  }
  assert {
    condition     = strcontains(output.boot_scripts["eu-1"], "rm -f /var/lib/quicmq/ca/ca-key.pem")
    error_message = "a node switched to node_certs must drop a CA key an earlier boot left behind"
  }
}

run "refuses_both_ca_key_and_node_certs" {
  command = plan
  variables {
    node_certs = {
      "eu-1" = { cert_pem = "-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----", key_pem = "-----BEGIN PRIVATE KEY-----\nA\n-----END PRIVATE KEY-----" }
      "eu-2" = { cert_pem = "-----BEGIN CERTIFICATE-----\nB\n-----END CERTIFICATE-----", key_pem = "-----BEGIN PRIVATE KEY-----\nB\n-----END PRIVATE KEY-----" }
    }
  }
  expect_failures = [output.configs, output.boot_scripts]
}

run "refuses_neither_ca_key_nor_node_certs" {
  command = plan
  variables {
    ca_key_pem = null
  }
  expect_failures = [output.configs, output.boot_scripts]
}

run "refuses_node_certs_missing_a_node" {
  command = plan
  variables {
    ca_key_pem = null
    node_certs = {
      "eu-1" = { cert_pem = "-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----", key_pem = "-----BEGIN PRIVATE KEY-----\nA\n-----END PRIVATE KEY-----" }
    }
  }
  expect_failures = [output.configs, output.boot_scripts]
}

run "refuses_node_certs_that_are_not_pem" {
  command = plan
  variables {
    ca_key_pem = null
    node_certs = {
      "eu-1" = { cert_pem = "eu-1/node.pem", key_pem = "eu-1/node-key.pem" }
      "eu-2" = { cert_pem = "eu-2/node.pem", key_pem = "eu-2/node-key.pem" }
    }
  }
  expect_failures = [var.node_certs]
}

run "admin_api_when_asked" {
  command = plan
  variables {
    admin_api = true
  }
  assert {
    condition     = strcontains(output.configs["eu-1"], "admin_api = true")
    error_message = "admin_api = true must reach the configuration"
  }
}

# Replication (the node's replicas key): by default 3 from 3 nodes on, and only rendered above 1,
# so a single-copy region's configuration (and boot script) stays as it was.
run "three_nodes_replicate_by_default" {
  command = plan
  variables {
    nodes = [
      { name = "eu-1", private_ip = "10.0.1.10", public_ip = "198.51.100.10" },
      { name = "eu-2", private_ip = "10.0.1.11", public_ip = "198.51.100.11" },
      { name = "eu-3", private_ip = "10.0.1.12", public_ip = "198.51.100.12" },
    ]
  }
  assert {
    condition     = length(output.configs) == 3 && alltrue([for c in values(output.configs) : strcontains(c, "\nreplicas        = 3\n") && !strcontains(c, "raft_tick")])
    error_message = "a region of 3 nodes renders replicas = 3 on every node, and no raft_tick unless given"
  }
  assert {
    condition     = strcontains(output.configs["eu-3"], "join            = [\"10.0.1.10:7946\",\"10.0.1.11:7946\"]")
    error_message = "each replica joins the region's other nodes"
  }
}

run "one_node_no_replication" {
  command = plan
  variables {
    nodes = [{ name = "eu-1", private_ip = "10.0.1.10", public_ip = "198.51.100.10" }]
  }
  assert {
    condition     = !strcontains(output.configs["eu-1"], "replicas") && !strcontains(output.configs["eu-1"], "raft_")
    error_message = "one node: no replicas key (the node's default, 1)"
  }
}

run "two_nodes_no_replication_by_default" {
  command = plan
  assert {
    condition     = alltrue([for c in values(output.configs) : !strcontains(c, "replicas")])
    error_message = "2 nodes: single-copy topics unless replicas is given"
  }
}

run "replicas_and_raft_tick_when_given" {
  command = plan
  variables {
    replicas  = 2
    raft_tick = "100ms"
  }
  assert {
    condition     = alltrue([for c in values(output.configs) : strcontains(c, "\nreplicas        = 2\nraft_tick       = \"100ms\"\n")])
    error_message = "replicas and raft_tick must reach every node's configuration"
  }
}

run "replicas_1_on_three_nodes" {
  command = plan
  variables {
    nodes = [
      { name = "eu-1", private_ip = "10.0.1.10", public_ip = "198.51.100.10" },
      { name = "eu-2", private_ip = "10.0.1.11", public_ip = "198.51.100.11" },
      { name = "eu-3", private_ip = "10.0.1.12", public_ip = "198.51.100.12" },
    ]
    replicas = 1
  }
  assert {
    condition     = alltrue([for c in values(output.configs) : !strcontains(c, "replicas")])
    error_message = "replicas = 1 keeps a region of 3 on single-copy topics"
  }
}

run "refuses_more_replicas_than_nodes" {
  command = plan
  variables {
    replicas = 3
  }
  expect_failures = [output.configs, output.boot_scripts]
}

run "refuses_replicas_out_of_range" {
  command = plan
  variables {
    replicas = 8
  }
  expect_failures = [var.replicas]
}

run "refuses_a_fractional_replicas" {
  command = plan
  variables {
    replicas = 1.5
  }
  expect_failures = [var.replicas]
}

run "refuses_a_bad_raft_tick" {
  command = plan
  variables {
    raft_tick = "50"
  }
  expect_failures = [var.raft_tick]
}
