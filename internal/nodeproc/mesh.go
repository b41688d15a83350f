package nodeproc

import (
	"slices"
	"testing"
)

// Mesh is regions of node processes sharing one CA, joined by the WAN pool: each node has a
// fixed client address and a WAN address, and joins every node of every other region (so
// that a node restarting while some of them are down still finds the pool).
type Mesh struct {
	T       testing.TB
	Regions []*Region
}

// NewMesh names the nodes of each region (nodes(region) of them: REGION1, ...), with fixed
// client, gossip and WAN addresses, sharing one CA, and starts none (Start, StartAll).
func NewMesh(t testing.TB, bin string, regions []string, nodes func(region string) int) *Mesh {
	t.Helper()
	m := &Mesh{T: t}
	caDir := t.TempDir()
	for _, name := range regions {
		r := NewRegion(t, bin, name, nodes(name))
		r.CADir = caDir
		for _, n := range r.Nodes {
			n.Listen, n.WAN = FreeAddr(t), FreeAddr(t)
		}
		m.Regions = append(m.Regions, r)
	}
	for _, r := range m.Regions {
		for _, o := range m.Regions {
			if o != r {
				for _, n := range o.Nodes {
					r.WANJoin = append(r.WANJoin, n.WAN)
				}
			}
		}
	}
	return m
}

// Region is the region named name; nil if the mesh has none.
func (m *Mesh) Region(name string) *Region {
	if i := slices.IndexFunc(m.Regions, func(r *Region) bool { return r.Name == name }); i >= 0 {
		return m.Regions[i]
	}
	return nil
}

// CAFile is the CA certificate the mesh's clients trust.
func (m *Mesh) CAFile() string { return m.Regions[0].CAFile() }

// Start starts (again) every node of region name, each returning once it listens.
func (m *Mesh) Start(name string) {
	m.T.Helper()
	r := m.Region(name)
	for i := range r.Nodes {
		r.Start(i)
	}
}

// Kill SIGKILLs every node of region name.
func (m *Mesh) Kill(name string) {
	r := m.Region(name)
	for i := range r.Nodes {
		r.Kill(i)
	}
}
