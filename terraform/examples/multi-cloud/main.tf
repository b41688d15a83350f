# A mesh of three QuicMQ regions: two on AWS (us-east-1, eu-west-1) and one on GCP
# (europe-west1), joined over WAN gossip on their static public addresses. Each region's
# firewall admits only the other regions' /32s on the WAN gossip port and QUIC links. Each
# region runs node_count nodes (3) with replicas 3: every topic is held by the region's three
# nodes, kept in agreement by raft, and survives the loss of one (docs/operations.md). A
# region's nodes start together: it forms once its three are up.
terraform {
  required_version = ">= 1.6.0"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 6.0"
    }
    google = {
      source  = "hashicorp/google"
      version = ">= 6.0"
    }
  }
}

# AWS provider v6 takes the region per resource: one provider serves both AWS regions.
provider "aws" {
  region = "us-east-1"
}

provider "google" {
  project = var.project
  region  = "europe-west1"
}

locals {
  common = {
    admin_cidrs   = var.admin_cidrs
    gossip_key    = var.gossip_key
    ca_cert_pem   = var.ca_cert_pem
    ca_key_pem    = var.ca_key_pem
    node_certs    = var.node_certs # one map for the whole mesh: each region takes its nodes'
    tokens        = var.tokens
    binary_url    = var.binary_url
    binary_sha256 = var.binary_sha256
    mirror        = ["audit.>"]
    node_count    = var.node_count
    replicas      = var.replicas
  }
}

module "us" {
  source = "../../modules/aws-region"

  aws_region = "us-east-1"
  region     = "us"
  vpc_cidr   = "10.41.0.0/16"
  # Addresses are allocated before instances, so regions can name each other without a cycle.
  wan_join   = concat(module.eu.wan_join, module.gcp.wan_join)
  peer_cidrs = concat(module.eu.peer_cidrs, module.gcp.peer_cidrs)

  admin_cidrs   = local.common.admin_cidrs
  gossip_key    = local.common.gossip_key
  ca_cert_pem   = local.common.ca_cert_pem
  ca_key_pem    = local.common.ca_key_pem
  node_certs    = local.common.node_certs
  tokens        = local.common.tokens
  binary_url    = local.common.binary_url
  binary_sha256 = local.common.binary_sha256
  mirror        = local.common.mirror
  node_count    = local.common.node_count
  replicas      = local.common.replicas
}

module "eu" {
  source = "../../modules/aws-region"

  aws_region = "eu-west-1"
  region     = "eu"
  vpc_cidr   = "10.42.0.0/16"
  wan_join   = concat(module.us.wan_join, module.gcp.wan_join)
  peer_cidrs = concat(module.us.peer_cidrs, module.gcp.peer_cidrs)

  admin_cidrs   = local.common.admin_cidrs
  gossip_key    = local.common.gossip_key
  ca_cert_pem   = local.common.ca_cert_pem
  ca_key_pem    = local.common.ca_key_pem
  node_certs    = local.common.node_certs
  tokens        = local.common.tokens
  binary_url    = local.common.binary_url
  binary_sha256 = local.common.binary_sha256
  mirror        = local.common.mirror
  node_count    = local.common.node_count
  replicas      = local.common.replicas
}

module "gcp" {
  source = "../../modules/gcp-region"

  project     = var.project
  gcp_region  = "europe-west1"
  zone        = "europe-west1-b"
  region      = "eu-gcp"
  subnet_cidr = "10.43.1.0/24"
  wan_join    = concat(module.us.wan_join, module.eu.wan_join)
  peer_cidrs  = concat(module.us.peer_cidrs, module.eu.peer_cidrs)

  admin_cidrs   = local.common.admin_cidrs
  gossip_key    = local.common.gossip_key
  ca_cert_pem   = local.common.ca_cert_pem
  ca_key_pem    = local.common.ca_key_pem
  node_certs    = local.common.node_certs
  tokens        = local.common.tokens
  binary_url    = local.common.binary_url
  binary_sha256 = local.common.binary_sha256
  mirror        = local.common.mirror
  node_count    = local.common.node_count
  replicas      = local.common.replicas
}

output "node_addresses" {
  description = "Per region, per node: public and private address."
  value       = { us = module.us.node_addresses, eu = module.eu.node_addresses, eu-gcp = module.gcp.node_addresses }
}

output "quic_addresses" {
  description = "Client addresses of every node."
  value       = concat(module.us.quic_addresses, module.eu.quic_addresses, module.gcp.quic_addresses)
}

output "wan_join" {
  description = "The WAN join list: every node's WAN gossip address."
  value       = concat(module.us.wan_join, module.eu.wan_join, module.gcp.wan_join)
}

output "metrics_endpoints" {
  description = "Every node's scrape target."
  value       = concat(module.us.metrics_endpoints, module.eu.metrics_endpoints, module.gcp.metrics_endpoints)
}
