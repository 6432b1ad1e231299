package strictyaml

import "gopkg.in/yaml.v3"

// lineIndex maps between document paths and input lines.
type lineIndex struct {
	// byPath is the line of each mapping key or list item.
	byPath map[string]int
	// byLine is the deepest path that starts on each line.
	byLine map[int]string
}

// indexLines records the line of every key and list item under root. Aliases
// are not followed: a path reached only through an alias has no entry.
func indexLines(root *yaml.Node) lineIndex {
	idx := lineIndex{byPath: map[string]int{}, byLine: map[int]string{}}
	idx.add(root, Root(), root.Line)
	return idx
}

func (idx lineIndex) add(n *yaml.Node, p Path, line int) {
	if _, ok := idx.byPath[p.String()]; !ok {
		idx.byPath[p.String()] = line
	}
	idx.byLine[line] = p.String()
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if isMergeKey(k) {
				continue
			}
			idx.add(v, p.Field(k.Value), k.Line)
		}
	case yaml.SequenceNode:
		for i, item := range n.Content {
			idx.add(item, p.Index(i), item.Line)
		}
	}
}
