variable "aws_region" {
  description = "AWS region to deploy in, e.g. eu-west-1 (AWS provider v6 takes it per resource, so one provider serves several regions)."
  type        = string
}

variable "region" {
  description = "QuicMQ region name of these nodes."
  type        = string
}

variable "node_count" {
  description = "Nodes in this region (named REGION-1, REGION-2, ...). From 3 nodes on, each topic is held by replicas of them (3 by default) and survives the loss of a node; with 2, or with replicas = 1, the nodes split the region's topics, one node each (placement, docs/operations.md). Either way they start together, before the first publish."
  type        = number
  default     = 1
  validation {
    condition     = var.node_count >= 1 && var.node_count <= 16
    error_message = "node_count: from 1 to 16."
  }
}

variable "instance_type" {
  description = "EC2 instance type."
  type        = string
  default     = "m7i.large"
}

variable "ami_id" {
  description = "AMI to boot (Debian 12 or another systemd distribution with curl). Null: the latest official Debian 12 amd64 image."
  type        = string
  default     = null
}

variable "vpc_cidr" {
  description = "CIDR of the VPC this module creates for the region."
  type        = string
  default     = "10.40.0.0/16"
}

variable "volume_size_gb" {
  description = "Root volume size in GiB (holds the log)."
  type        = number
  default     = 100
}

variable "admin_cidrs" {
  description = "Ranges allowed to reach the metrics/admin port and SSH (e.g. the Prometheus hosts). Never 0.0.0.0/0."
  type        = list(string)
  validation {
    condition     = length(var.admin_cidrs) > 0 && !contains(var.admin_cidrs, "0.0.0.0/0")
    error_message = "admin_cidrs: at least one range, and not 0.0.0.0/0: the admin API can migrate links."
  }
}

variable "client_cidrs" {
  description = "Ranges allowed to reach the QUIC port (clients)."
  type        = list(string)
  default     = ["0.0.0.0/0"]
}

variable "peer_cidrs" {
  description = "Other regions' node addresses (/32s) allowed to reach the WAN gossip port and QUIC links."
  type        = list(string)
  default     = []
}

variable "ssh_key_name" {
  description = "EC2 key pair for SSH (null: none; use SSM)."
  type        = string
  default     = null
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}

# Passed through to modules/config.
variable "wan_join" {
  description = "WAN gossip addresses of nodes of other regions."
  type        = list(string)
  default     = []
}

variable "gossip_key" {
  description = "Base64 of the 32-byte gossip key, the same on every node of the mesh."
  type        = string
  sensitive   = true
}

variable "ca_cert_pem" {
  description = "PEM of the mesh CA certificate (with node_certs: may be a bundle of several CAs)."
  type        = string
}

variable "ca_key_pem" {
  description = "PEM of the mesh CA key: every node gets it and issues its own certificate. Give either this or node_certs."
  type        = string
  default     = null
  sensitive   = true
}

variable "node_certs" {
  description = "Pre-issued node certificates (quicmq certs node) by node name (REGION-1, REGION-2, ...): cert_pem and key_pem. Instead of ca_key_pem: no node holds the CA key. Entries for other regions' nodes are ignored."
  type = map(object({
    cert_pem = string
    key_pem  = string
  }))
  default   = null
  sensitive = true
}

variable "tokens" {
  description = "Client tokens (16+ characters each)."
  type        = list(string)
  default     = []
  sensitive   = true
}

variable "replicas" {
  description = "Replicas of each new topic in the region (1 to 7, odd recommended), kept in agreement by raft; at most node_count, the same on every node. The region forms once its first replicas nodes by name are up. Null: 3 when node_count is at least 3, else 1 (each topic on one node). A region already running 3 or more nodes without replication: set 1 to keep it so (a change replaces the instances and their logs)."
  type        = number
  default     = null
}

variable "raft_tick" {
  description = "One raft tick of the replicated topics (Go duration; elections 10-20 ticks after a leader's last heartbeat). Null: the node's default (50ms)."
  type        = string
  default     = null
}

variable "admin_api" {
  description = "Serve the admin API's state-changing endpoints (link migration, gossip key changes) on the metrics port, reachable from admin_cidrs. Off: refused (403)."
  type        = bool
  default     = false
}

variable "mirror" {
  description = "Topic patterns mirrored from every other region."
  type        = list(string)
  default     = []
}

variable "binary_url" {
  description = "URL of the quicmq linux/amd64 binary."
  type        = string
}

variable "binary_sha256" {
  description = "SHA-256 (hex) of that binary."
  type        = string
}

variable "ports" {
  description = "Ports (see modules/config)."
  type = object({
    quic    = optional(number, 7400)
    gossip  = optional(number, 7946)
    wan     = optional(number, 7947)
    metrics = optional(number, 9400)
  })
  default = {}
}
