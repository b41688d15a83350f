variable "gossip_key" {
  description = "Base64 of the 32-byte gossip key (head -c32 /dev/urandom | base64)."
  type        = string
  sensitive   = true
}

variable "ca_cert_pem" {
  description = "PEM of the mesh CA certificate: e.g. file(\"ca/ca.pem\") after 'quicmq node' created one, see docs/operations.md."
  type        = string
}

variable "ca_key_pem" {
  description = "PEM of the mesh CA key: every node gets it and issues its own certificate. Give either this or node_certs."
  type        = string
  default     = null
  sensitive   = true
}

variable "node_certs" {
  description = "Pre-issued node certificates by node name (quicmq certs node, see docs/operations.md): { \"eu-1\" = { cert_pem = file(\"eu-1/node.pem\"), key_pem = file(\"eu-1/node-key.pem\") } }. Instead of ca_key_pem: no node holds the CA key."
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
  sensitive   = true
}

variable "binary_url" {
  description = "URL of the quicmq linux/amd64 binary (e.g. a release asset or a bucket object)."
  type        = string
}

variable "binary_sha256" {
  description = "SHA-256 of that binary."
  type        = string
}

variable "admin_cidrs" {
  description = "Ranges that may scrape metrics and use the admin API and SSH."
  type        = list(string)
}

variable "project" {
  description = "GCP project id."
  type        = string
}

variable "node_count" {
  description = "Nodes per region (REGION-1, REGION-2, ...): 3 for production, so that each region keeps its topics through the loss of a node. With node_certs, every node needs an entry."
  type        = number
  default     = 3
}

variable "replicas" {
  description = "Replicas of each topic in a region (at most node_count, odd recommended): 3, each topic on all three nodes of its region; a publish is acknowledged once two have it. 1: each topic on one node (the nodes split the topics)."
  type        = number
  default     = 3
}
