variable "region" {
  description = "QuicMQ region name of these nodes (1-64 of [A-Za-z0-9_-])."
  type        = string
  validation {
    condition     = can(regex("^[A-Za-z0-9_-]{1,64}$", var.region))
    error_message = "region: want 1-64 characters of [A-Za-z0-9_-]."
  }
}

variable "nodes" {
  description = "The region's nodes: name, the private address the node binds, and the static public address other regions and clients reach."
  type = list(object({
    name       = string
    private_ip = string
    public_ip  = string
  }))
  validation {
    condition     = length(var.nodes) > 0 && alltrue([for n in var.nodes : can(regex("^[A-Za-z0-9_-]{1,64}$", n.name))])
    error_message = "nodes: at least one, each named with 1-64 characters of [A-Za-z0-9_-]."
  }
}

variable "wan_join" {
  description = "WAN gossip addresses (IP:PORT) of nodes of other regions to join. Empty for the first region."
  type        = list(string)
  default     = []
}

variable "gossip_key" {
  description = "Base64 of the 32-byte gossip key, the same on every node of the mesh."
  type        = string
  sensitive   = true
  validation {
    condition     = can(base64decode(var.gossip_key)) && length(var.gossip_key) == 44
    error_message = "gossip_key: want the base64 of 32 bytes (head -c32 /dev/urandom | base64)."
  }
}

variable "ca_cert_pem" {
  description = "PEM of the mesh CA certificate (ca.pem), shared by every node of the mesh. With node_certs it may be a bundle of several CAs (during a CA rotation)."
  type        = string
}

variable "ca_key_pem" {
  description = "PEM of the mesh CA key (ca-key.pem): every node gets it and issues its own certificate from it. Give either this or node_certs."
  type        = string
  default     = null
  sensitive   = true
}

variable "node_certs" {
  description = "Pre-issued node certificates (quicmq certs node), by node name: cert_pem (node.pem) and key_pem (node-key.pem). Instead of ca_key_pem: no node holds the CA key. Needs an entry for every node; entries for other regions' nodes are ignored."
  type = map(object({
    cert_pem = string
    key_pem  = string
  }))
  default   = null
  sensitive = true
  validation {
    condition = nonsensitive(alltrue([
      for c in values(coalesce(var.node_certs, {})) : strcontains(c.cert_pem, "-----BEGIN CERTIFICATE-----") && strcontains(c.key_pem, "PRIVATE KEY-----")
    ]))
    error_message = "node_certs: each entry wants cert_pem = file(\"DIR/node.pem\") and key_pem = file(\"DIR/node-key.pem\") from 'quicmq certs node' (PEM)."
  }
}

variable "tokens" {
  description = "Client tokens (16+ characters each). Empty: anonymous clients (not for production)."
  type        = list(string)
  default     = []
  sensitive   = true
  validation {
    condition     = alltrue([for t in var.tokens : length(t) >= 16])
    error_message = "tokens: each at least 16 characters."
  }
}

variable "mirror" {
  description = "Topic patterns mirrored from every other region even without local subscribers."
  type        = list(string)
  default     = []
}

variable "retention_age" {
  description = "Delete records older than this, per topic (Go duration; \"0s\": keep forever)."
  type        = string
  default     = "168h"
}

variable "retention_bytes" {
  description = "Keep at most this many bytes per topic (0: no limit)."
  type        = number
  default     = 0
}

variable "max_payload" {
  description = "Largest record payload in bytes."
  type        = number
  default     = 1048576
}

variable "admin_api" {
  description = "Serve the admin API's state-changing endpoints (quicmq links --migrate, quicmq gossip-keys install/use/remove) on the metrics port. Off: they are refused (403); /metrics, members and links are served either way."
  type        = bool
  default     = false
}

variable "log_level" {
  description = "debug, info, warn or error."
  type        = string
  default     = "info"
  validation {
    condition     = contains(["debug", "info", "warn", "error"], var.log_level)
    error_message = "log_level: want debug, info, warn or error."
  }
}

variable "ports" {
  description = "QUIC (UDP), LAN gossip (TCP+UDP), WAN gossip (TCP+UDP) and metrics (TCP) ports."
  type = object({
    quic    = optional(number, 7400)
    gossip  = optional(number, 7946)
    wan     = optional(number, 7947)
    metrics = optional(number, 9400)
  })
  default = {}
}

variable "binary_url" {
  description = "URL of the quicmq linux binary the boot script downloads."
  type        = string
}

variable "binary_sha256" {
  description = "SHA-256 (hex) of that binary; the boot script refuses any other."
  type        = string
  validation {
    condition     = can(regex("^[0-9a-f]{64}$", var.binary_sha256))
    error_message = "binary_sha256: want 64 lower-case hex digits (sha256sum quicmq)."
  }
}

variable "replicas" {
  description = "Replicas of each new topic in the region (the node's replicas key), kept in agreement by raft: 1 (each topic on one node), or 2 to 7 (odd recommended: 3 survives the loss of a node). Every node of the region gets the same value, and there must be at least that many nodes; the region's metadata group forms once its first replicas nodes by name are up, so they start together. Null: 3 when the region has at least 3 nodes, else 1."
  type        = number
  default     = null
  validation {
    condition     = contains([1, 2, 3, 4, 5, 6, 7], coalesce(var.replicas, 1))
    error_message = "replicas: want a whole number from 1 to 7 (odd recommended: 3 survives the loss of a node), or null for 3 with 3 or more nodes, else 1."
  }
}

variable "raft_tick" {
  description = "One raft tick of the replicated topics (the node's raft_tick key; Go duration): elections start 10-20 ticks after a leader's last heartbeat. Raise it when the region's nodes are more than a few ms apart. Null: the node's default (50ms)."
  type        = string
  default     = null
  validation {
    condition     = var.raft_tick == null || can(regex("^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$", coalesce(var.raft_tick, "-")))
    error_message = "raft_tick: want a Go duration such as \"50ms\" or \"100ms\" (null: the node's default, 50ms)."
  }
}
