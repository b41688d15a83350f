# One QuicMQ region on AWS: a VPC with one public subnet, a security group (QUIC as UDP,
# gossip TCP+UDP, metrics and SSH from the admin range only), and per node a static Elastic
# IP, a fixed private address and an instance booted by modules/config's script.
locals {
  names       = [for i in range(var.node_count) : "${var.region}-${i + 1}"]
  subnet_cidr = cidrsubnet(var.vpc_cidr, 8, 1)
  private_ips = { for i, n in local.names : n => cidrhost(local.subnet_cidr, 10 + i) }
  tags        = merge({ "quicmq:region" = var.region }, var.tags)
  ami         = var.ami_id != null ? var.ami_id : data.aws_ami.debian[0].id

  # Each rule: port, protocol, who.
  ingress = concat(
    [for c in var.client_cidrs : { name = "quic-client-${c}", port = var.ports.quic, proto = "udp", cidr = c }],
    # Peers' addresses are often unknown until apply (other regions' new addresses): their
    # rules are keyed by position so that for_each knows its keys at plan time.
    [for i, c in var.peer_cidrs : { name = "quic-peer-${i}", port = var.ports.quic, proto = "udp", cidr = c }],
    flatten([for i, c in var.peer_cidrs : [for p in ["tcp", "udp"] : { name = "wan-${p}-peer-${i}", port = var.ports.wan, proto = p, cidr = c }]]),
    [for p in ["tcp", "udp"] : { name = "gossip-${p}", port = var.ports.gossip, proto = p, cidr = var.vpc_cidr }],
    [for p in ["tcp", "udp"] : { name = "wan-${p}-vpc", port = var.ports.wan, proto = p, cidr = var.vpc_cidr }],
    [for c in var.admin_cidrs : { name = "metrics-${c}", port = var.ports.metrics, proto = "tcp", cidr = c }],
    [for c in var.admin_cidrs : { name = "ssh-${c}", port = 22, proto = "tcp", cidr = c }],
  )
}

data "aws_ami" "debian" {
  count       = var.ami_id == null ? 1 : 0
  region      = var.aws_region
  most_recent = true
  owners      = ["136693071363"] # Debian
  filter {
    name   = "name"
    values = ["debian-12-amd64-*"]
  }
  filter {
    name   = "architecture"
    values = ["x86_64"]
  }
}

resource "aws_vpc" "this" {
  region               = var.aws_region
  cidr_block           = var.vpc_cidr
  enable_dns_support   = true
  enable_dns_hostnames = true
  tags                 = merge(local.tags, { Name = "quicmq-${var.region}" })
}

resource "aws_internet_gateway" "this" {
  region = var.aws_region
  vpc_id = aws_vpc.this.id
  tags   = local.tags
}

resource "aws_subnet" "this" {
  region     = var.aws_region
  vpc_id     = aws_vpc.this.id
  cidr_block = local.subnet_cidr
  tags       = merge(local.tags, { Name = "quicmq-${var.region}" })
}

resource "aws_route_table" "this" {
  region = var.aws_region
  vpc_id = aws_vpc.this.id
  route {
    cidr_block = "0.0.0.0/0"
    gateway_id = aws_internet_gateway.this.id
  }
  tags = local.tags
}

resource "aws_route_table_association" "this" {
  region         = var.aws_region
  subnet_id      = aws_subnet.this.id
  route_table_id = aws_route_table.this.id
}

resource "aws_security_group" "node" {
  region      = var.aws_region
  name        = "quicmq-${var.region}"
  description = "QuicMQ nodes of region ${var.region}"
  vpc_id      = aws_vpc.this.id
  tags        = local.tags
}

resource "aws_vpc_security_group_ingress_rule" "node" {
  for_each          = { for r in local.ingress : r.name => r }
  region            = var.aws_region
  security_group_id = aws_security_group.node.id
  description       = "quicmq ${each.key}"
  ip_protocol       = each.value.proto
  from_port         = each.value.port
  to_port           = each.value.port
  cidr_ipv4         = each.value.cidr
  tags              = local.tags
}

resource "aws_vpc_security_group_egress_rule" "all" {
  region            = var.aws_region
  security_group_id = aws_security_group.node.id
  description       = "quicmq: outbound (links, gossip, binary download)"
  ip_protocol       = "-1"
  cidr_ipv4         = "0.0.0.0/0"
  tags              = local.tags
}

# Static public addresses, allocated before the instances so that the configuration (advertise
# address, other regions' wan_join) can name them.
resource "aws_eip" "node" {
  for_each = toset(local.names)
  region   = var.aws_region
  domain   = "vpc"
  tags     = merge(local.tags, { Name = each.key })
}

module "config" {
  source = "../config"

  region        = var.region
  nodes         = [for n in local.names : { name = n, private_ip = local.private_ips[n], public_ip = aws_eip.node[n].public_ip }]
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

resource "aws_instance" "node" {
  for_each               = toset(local.names)
  region                 = var.aws_region
  ami                    = local.ami
  instance_type          = var.instance_type
  subnet_id              = aws_subnet.this.id
  private_ip             = local.private_ips[each.key]
  vpc_security_group_ids = [aws_security_group.node.id]
  key_name               = var.ssh_key_name
  user_data_base64       = base64gzip(module.config.boot_scripts[each.key])
  # A new script (new binary, new config) replaces the node: its log is on the root volume,
  # so roll nodes one at a time (docs/operations.md).
  user_data_replace_on_change = true

  root_block_device {
    volume_size = var.volume_size_gb
    volume_type = "gp3"
    encrypted   = true
  }

  metadata_options {
    http_tokens = "required"
  }

  tags = merge(local.tags, { Name = each.key })
}

resource "aws_eip_association" "node" {
  for_each      = toset(local.names)
  region        = var.aws_region
  allocation_id = aws_eip.node[each.key].id
  instance_id   = aws_instance.node[each.key].id
}
