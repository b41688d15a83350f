# One QuicMQ region on GCP: a VPC network and subnetwork, firewall rules (QUIC as UDP, gossip
# TCP+UDP, metrics and SSH from the admin range only), and per node a static external
# address, a fixed internal address and an instance that runs modules/config's boot script as
# its startup script.
locals {
  names       = [for i in range(var.node_count) : "${var.region}-${i + 1}"]
  private_ips = { for i, n in local.names : n => cidrhost(var.subnet_cidr, 10 + i) }
  tag         = "quicmq-${lower(var.region)}"
  labels      = merge({ "quicmq-region" = lower(var.region) }, var.labels)
}

resource "google_compute_network" "this" {
  project                 = var.project
  name                    = "quicmq-${lower(var.region)}"
  auto_create_subnetworks = false
}

resource "google_compute_subnetwork" "this" {
  project       = var.project
  region        = var.gcp_region
  name          = "quicmq-${lower(var.region)}"
  network       = google_compute_network.this.id
  ip_cidr_range = var.subnet_cidr
}

resource "google_compute_firewall" "quic_clients" {
  project       = var.project
  name          = "quicmq-${lower(var.region)}-quic-clients"
  network       = google_compute_network.this.id
  direction     = "INGRESS"
  source_ranges = var.client_cidrs
  target_tags   = [local.tag]
  allow {
    protocol = "udp"
    ports    = [tostring(var.ports.quic)]
  }
}

resource "google_compute_firewall" "peers" {
  count         = length(var.peer_cidrs) > 0 ? 1 : 0
  project       = var.project
  name          = "quicmq-${lower(var.region)}-peers"
  network       = google_compute_network.this.id
  direction     = "INGRESS"
  source_ranges = var.peer_cidrs
  target_tags   = [local.tag]
  allow {
    protocol = "udp"
    ports    = [tostring(var.ports.quic), tostring(var.ports.wan)]
  }
  allow {
    protocol = "tcp"
    ports    = [tostring(var.ports.wan)]
  }
}

resource "google_compute_firewall" "internal" {
  project       = var.project
  name          = "quicmq-${lower(var.region)}-internal"
  network       = google_compute_network.this.id
  direction     = "INGRESS"
  source_ranges = [var.subnet_cidr]
  target_tags   = [local.tag]
  allow {
    protocol = "udp"
    ports    = [tostring(var.ports.quic), tostring(var.ports.gossip), tostring(var.ports.wan)]
  }
  allow {
    protocol = "tcp"
    ports    = [tostring(var.ports.gossip), tostring(var.ports.wan)]
  }
}

resource "google_compute_firewall" "admin" {
  project       = var.project
  name          = "quicmq-${lower(var.region)}-admin"
  network       = google_compute_network.this.id
  direction     = "INGRESS"
  source_ranges = var.admin_cidrs
  target_tags   = [local.tag]
  allow {
    protocol = "tcp"
    ports    = [tostring(var.ports.metrics), "22"]
  }
}

resource "google_compute_address" "node" {
  for_each     = toset(local.names)
  project      = var.project
  region       = var.gcp_region
  name         = "quicmq-${lower(each.key)}"
  address_type = "EXTERNAL"
  network_tier = "PREMIUM"
}

module "config" {
  source = "../config"

  region        = var.region
  nodes         = [for n in local.names : { name = n, private_ip = local.private_ips[n], public_ip = google_compute_address.node[n].address }]
  wan_join      = var.wan_join
  gossip_key    = var.gossip_key
  ca_cert_pem   = var.ca_cert_pem
  ca_key_pem    = var.ca_key_pem
  node_certs    = var.node_certs
  tokens        = var.tokens
  mirror        = var.mirror
  admin_api     = var.admin_api
  replicas      = var.replicas
  raft_tick     = var.raft_tick
  binary_url    = var.binary_url
  binary_sha256 = var.binary_sha256
  ports         = var.ports
}

resource "google_compute_instance" "node" {
  for_each     = toset(local.names)
  project      = var.project
  zone         = var.zone
  name         = "quicmq-${lower(each.key)}"
  machine_type = var.machine_type
  tags         = [local.tag]
  labels       = local.labels

  boot_disk {
    initialize_params {
      image = var.image
      size  = var.disk_size_gb
      type  = "pd-ssd"
    }
  }

  network_interface {
    subnetwork = google_compute_subnetwork.this.id
    network_ip = local.private_ips[each.key]
    access_config {
      nat_ip       = google_compute_address.node[each.key].address
      network_tier = "PREMIUM"
    }
  }

  # GCE Debian images have no cloud-init: the boot script runs as the startup script (on
  # every boot; it is idempotent).
  metadata_startup_script = module.config.boot_scripts[each.key]

  shielded_instance_config {
    enable_secure_boot = true
  }
}
