# One QuicMQ region on AWS (eu-west-1), one node: no replication (for production, 3 nodes
# with replicas 3, as in examples/multi-cloud).
terraform {
  required_version = ">= 1.6.0"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 6.0"
    }
  }
}

provider "aws" {
  region = "eu-west-1"
}

module "eu" {
  source = "../../modules/aws-region"

  aws_region    = "eu-west-1"
  region        = "eu"
  admin_cidrs   = var.admin_cidrs
  gossip_key    = var.gossip_key
  ca_cert_pem   = var.ca_cert_pem
  ca_key_pem    = var.ca_key_pem
  node_certs    = var.node_certs
  tokens        = var.tokens
  binary_url    = var.binary_url
  binary_sha256 = var.binary_sha256
}

output "node_addresses" {
  value = module.eu.node_addresses
}

output "quic_addresses" {
  value = module.eu.quic_addresses
}

output "wan_join" {
  value = module.eu.wan_join
}

output "metrics_endpoints" {
  value = module.eu.metrics_endpoints
}
