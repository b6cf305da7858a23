extension JSON {
    /// Nesting of arrays and objects in this value, the value itself included: a scalar is 0, `[]` and `{}` are 1,
    /// `{"a":[1]}` is 2. What `Limits.maxDocumentDepth` bounds. Walks the tree with a heap stack of its own (one entry
    /// per container not yet visited), so it costs no thread stack however deep the value is.
    public var nestingDepth: Int {
        var deepest = 0
        var pending: [(JSON, Int)] = []
        if self.isContainer { pending.append((self, 1)) }
        while let (value, depth) = pending.popLast() {
            deepest = max(deepest, depth)
            switch value {
            case .array(let items):
                for item in items where item.isContainer { pending.append((item, depth + 1)) }
            case .object(let members):
                for (_, member) in members where member.isContainer { pending.append((member, depth + 1)) }
            default:
                break
            }
        }
        return deepest
    }

    /// An array or an object.
    private var isContainer: Bool {
        switch self {
        case .array, .object: return true
        default: return false
        }
    }
}
