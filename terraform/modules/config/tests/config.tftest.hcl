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
  ca_key_pem    = "-----BEGIN PRIVATE KEY-----\nKEY\n-----END PRIVATE KEY-----"
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
