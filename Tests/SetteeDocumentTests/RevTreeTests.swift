import SetteeDocument
import SetteeJSON
import Testing

private func rev(_ s: String) -> RevID { RevID(s)! }

private func body(_ s: String) -> [UInt8] { Array(s.utf8) }

@Suite struct RevIDTests {
    // Proves rev ids parse only in "N-digest" form and order by generation then digest (CouchDB's order).
    @Test func parseAndOrder() {
        #expect(RevID("3-abc") == RevID(generation: 3, digest: "abc"))
        #expect(RevID("0-abc") == nil)
        #expect(RevID("x-abc") == nil)
        #expect(RevID("3-") == nil)
        #expect(RevID("abc") == nil)
        #expect(rev("2-z") < rev("10-a"))
        #expect(rev("2-a") < rev("2-b"))
        #expect(rev("7-ff").description == "7-ff")
    }

    // Proves new rev ids are deterministic, ignore member order and `_` members other than _attachments,
    // and depend on parent, deletion and content.
    @Test func nextIsDeterministic() throws {
        let a = try JSON.parse(#"{"x":1,"y":{"b":2,"a":[1,"s"]},"_id":"d","_rev":"1-q"}"#)
        let b = try JSON.parse(#"{"y":{"a":[1,"s"],"b":2},"x":1}"#)
        let p = rev("1-abc")
        let r1 = try #require(RevID.next(parent: p, deleted: false, body: a))
        #expect(r1 == RevID.next(parent: p, deleted: false, body: b))
        #expect(r1.generation == 2 && r1.digest.count == 32)
        #expect(r1 != RevID.next(parent: nil, deleted: false, body: a))
        #expect(r1 != RevID.next(parent: p, deleted: true, body: a))
        #expect(r1 != RevID.next(parent: p, deleted: false, body: try JSON.parse(#"{"x":2}"#)))
        let withAtt = try JSON.parse(#"{"x":1,"_attachments":{"a":{"digest":"sha1-x","stub":true}}}"#)
        #expect(RevID.next(parent: p, deleted: false, body: withAtt) != RevID.next(parent: p, deleted: false, body: b))
        #expect(RevID.next(parent: nil, deleted: false, body: b)?.generation == 1)
    }
}

@Suite struct RevTreeTests {
    // Proves local edits build a chain, a stale parent is a conflict, and the winner follows the leaves.
    @Test func editsAndConflicts() throws {
        var t = RevTree()
        try t.add(rev("1-a"), parent: nil, deleted: false, body: body(#"{"v":1}"#))
        try t.add(rev("2-a"), parent: rev("1-a"), deleted: false, body: body(#"{"v":2}"#))
        #expect(throws: RevTreeError.conflict) { try t.add(rev("2-b"), parent: rev("1-a"), deleted: false, body: nil) }
        #expect(throws: RevTreeError.missingParent) {
            try t.add(rev("3-b"), parent: rev("2-zz"), deleted: false, body: nil)
        }
        #expect(throws: RevTreeError.conflict) { try t.add(rev("1-b"), parent: nil, deleted: false, body: nil) }
        #expect(t.winner == rev("2-a") && t.leaves == [rev("2-a")] && t.conflicts.isEmpty)
        #expect(t.history(of: rev("2-a")) == [rev("2-a"), rev("1-a")])
        #expect(t.body(of: rev("1-a")) == body(#"{"v":1}"#))
        // A replicated sibling branch: higher digest wins at equal generation.
        #expect(try t.addHistory([rev("2-b"), rev("1-a")], deleted: false, body: body("{}")) == 1)
        #expect(t.winner == rev("2-b") && t.conflicts == [rev("2-a")])
        // Deleting the winner hands the win to the other branch.
        try t.add(rev("3-d"), parent: rev("2-b"), deleted: true, body: body("{}"))
        #expect(t.winner == rev("2-a") && !t.winnerIsDeleted && t.conflicts.isEmpty)
        #expect(t.leaves.count == 2 && t.isDeleted(rev("3-d")) && t.isLeaf(rev("3-d")))
        // Deleting it too: the highest tombstone wins; re-creation hangs off it.
        try t.add(rev("3-e"), parent: rev("2-a"), deleted: true, body: nil)
        #expect(t.winner == rev("3-e") && t.winnerIsDeleted)
        #expect(throws: RevTreeError.self) { try t.add(rev("1-n"), parent: nil, deleted: false, body: nil) }
        try t.add(rev("4-n"), parent: nil, deleted: false, body: body("{}"))
        #expect(t.parent(of: rev("4-n")) == rev("3-e") && t.winner == rev("4-n"))
    }

    // Proves grafting replicated histories: known newest is a no-op, the rest attach to the newest known
    // ancestor or start a new root; non-consecutive histories are refused.
    @Test func graftHistories() throws {
        var t = RevTree()
        #expect(try t.addHistory([rev("3-c"), rev("2-b"), rev("1-a")], deleted: false, body: body("{}")) == 3)
        #expect(try t.addHistory([rev("3-c"), rev("2-b")], deleted: false, body: nil) == 0)
        #expect(try t.addHistory([rev("5-e"), rev("4-d"), rev("3-c")], deleted: true, body: nil) == 2)
        #expect(t.winner == rev("5-e") && t.winnerIsDeleted)
        #expect(t.history(of: rev("5-e")).count == 5 && t.isDeleted(rev("5-e")) && !t.isDeleted(rev("4-d")))
        #expect(try t.addHistory([rev("9-x"), rev("8-w")], deleted: false, body: nil) == 2)
        #expect(t.parent(of: rev("8-w")) == nil && t.winner == rev("9-x"))
        #expect(throws: RevTreeError.self) { try t.addHistory([rev("4-q"), rev("2-q")], deleted: false, body: nil) }
        #expect(throws: RevTreeError.self) { try t.addHistory([], deleted: false, body: nil) }
    }

    // Proves two trees fed the same histories in different orders end with the same revisions, leaves,
    // winner and conflicts (the property replication convergence rests on).
    @Test func randomOrdersConverge() throws {
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<200 {
            // A random set of branches over one root.
            var histories: [[RevID]] = []
            for b in 0..<Int.random(in: 1...5, using: &rng) {
                let fork = Int.random(in: 1...3, using: &rng)
                let length = Int.random(in: 0...4, using: &rng)
                var h = (1...fork).map { RevID(generation: $0, digest: "trunk\($0)") }
                h += (0..<length).map { RevID(generation: fork + 1 + $0, digest: "b\(b)g\(fork + 1 + $0)") }
                histories.append(h.reversed())
            }
            // A tombstone only on a branch's own newest revision (a revision is deleted or not for
            // every peer; histories that share their newest revision must agree on it).
            let ownBranches = histories.indices.filter { histories[$0][0].digest.hasPrefix("b") }
            let deletedLeaf = ownBranches.randomElement(using: &rng) ?? -1
            var a = RevTree()
            var b = RevTree()
            for (i, h) in histories.enumerated() { try a.addHistory(h, deleted: i == deletedLeaf, body: nil) }
            for (i, h) in histories.enumerated().shuffled(using: &rng) {
                // Send a suffix first sometimes, to graft without the full history, then the rest.
                try b.addHistory(h, deleted: i == deletedLeaf, body: nil)
            }
            #expect(Set(a.revisions) == Set(b.revisions))
            #expect(Set(a.leaves) == Set(b.leaves))
            #expect(a.winner == b.winner && a.conflicts == b.conflicts)
        }
    }

    // Proves pruning keeps the newest revs_limit revisions of every branch and body dropping keeps leaves.
    @Test func pruneAndBodies() throws {
        var t = RevTree()
        var parent: RevID?
        for g in 1...10 {
            let r = RevID(generation: g, digest: "m\(g)")
            try t.add(r, parent: parent, deleted: false, body: body("{\"g\":\(g)}"))
            parent = r
        }
        try t.addHistory([rev("4-side"), rev("3-m3")], deleted: false, body: body("{}"))
        t.dropAncestorBodies(keep: 2)
        #expect(t.body(of: rev("10-m10")) != nil && t.body(of: rev("8-m8")) != nil)
        #expect(t.body(of: rev("7-m7")) == nil && t.body(of: rev("4-side")) != nil)
        #expect(t.prune(revsLimit: 3) == 5)
        #expect(Set(t.revisions) == [rev("10-m10"), rev("9-m9"), rev("8-m8"), rev("4-side"), rev("3-m3"), rev("2-m2")])
        #expect(t.parent(of: rev("8-m8")) == nil && t.parent(of: rev("3-m3")) == rev("2-m2"))
        #expect(t.winner == rev("10-m10") && t.conflicts == [rev("4-side")])
        #expect(t.prune(revsLimit: 3) == 0)
    }

    // Proves the byte bound on ancestor bodies: nearest ancestors first, across branches, while their bytes fit;
    // leaves keep theirs whatever their size; the generation bound still applies within the byte bound.
    @Test func ancestorBodiesWithinABytesBound() throws {
        func chain() throws -> RevTree {
            var t = RevTree()
            var parent: RevID?
            for g in 1...10 {
                let r = RevID(generation: g, digest: "m\(g)")
                try t.add(r, parent: parent, deleted: false, body: [UInt8](repeating: UInt8(g), count: 100))
                parent = r
            }
            // A side branch from 7: 8-side is a leaf, so 7 is one generation below two leaves.
            try t.addHistory([rev("8-side"), rev("7-m7")], deleted: false, body: [UInt8](repeating: 0, count: 1000))
            return t
        }
        var t = try chain()
        t.dropAncestorBodies(keep: 20, maxBytes: 350)
        // Depth 1: 9-m9 and 7-m7 (200 bytes); depth 2: 8-m8 (300) and 6-m6 (400 > 350: dropped); deeper: none fit.
        let kept = Set(t.revisions.filter { t.body(of: $0) != nil })
        #expect(kept == [rev("10-m10"), rev("8-side"), rev("9-m9"), rev("7-m7"), rev("8-m8")], "\(kept)")
        t = try chain()
        t.dropAncestorBodies(keep: 1, maxBytes: .max)
        #expect(
            Set(t.revisions.filter { t.body(of: $0) != nil }) == [
                rev("10-m10"), rev("8-side"), rev("9-m9"), rev("7-m7"),
            ])
        t = try chain()
        let before = (t.revisions, t.leaves, t.winner, t.revsDiff([rev("11-x"), rev("9-m9")]).possibleAncestors)
        t.dropBodies()
        #expect(t.revisions.allSatisfy { t.body(of: $0) == nil })
        let after = (t.revisions, t.leaves, t.winner, t.revsDiff([rev("11-x"), rev("9-m9")]).possibleAncestors)
        #expect(before.0 == after.0 && before.1 == after.1 && before.2 == after.2 && before.3 == after.3)
        t = try chain()
        t.dropAncestorBodies(keep: 20, maxBytes: 0)
        #expect(Set(t.revisions.filter { t.body(of: $0) != nil }) == [rev("10-m10"), rev("8-side")])
    }

    // Proves _revs_diff answers only the unknown revisions and offers lower-generation leaves, and only
    // leaves, as possible ancestors (CouchDB's rule).
    @Test func revsDiff() throws {
        var t = RevTree()
        try t.addHistory([rev("3-c"), rev("2-b"), rev("1-a")], deleted: false, body: nil)
        let d = t.revsDiff([rev("2-b"), rev("4-x"), rev("3-y"), rev("4-x")])
        #expect(d.missing == [rev("4-x"), rev("3-y")])
        #expect(d.possibleAncestors == [rev("3-c")])
        #expect(t.revsDiff([rev("3-y")]).possibleAncestors.isEmpty)
        #expect(t.revsDiff([rev("1-a"), rev("3-c")]).missing.isEmpty)
        #expect(t.revsDiff([rev("1-a"), rev("3-c")]).possibleAncestors.isEmpty)
    }

    // Regression (LiteConvergenceProcessTests seed 8906530): a database holding 2-b only as the history
    // of its tombstone 3-d never had 2-b's attachments. Offering 2-b as a possible ancestor of a missing
    // sibling 3-e made every source send 3-e's attachments from 2-b as stubs, which the target then
    // refused. Only leaves below the missing generation are offered: here none.
    @Test func revsDiffNeverOffersAnInnerRevision() throws {
        var t = RevTree()
        try t.addHistory([rev("3-d"), rev("2-b"), rev("1-a")], deleted: true, body: nil)
        try t.addHistory([rev("2-s"), rev("1-a")], deleted: false, body: nil)
        let d = t.revsDiff([rev("3-e")])
        #expect(d.missing == [rev("3-e")])
        #expect(d.possibleAncestors == [rev("2-s")])
        #expect(!d.possibleAncestors.contains(rev("2-b")))
        #expect(t.revsDiff([rev("4-f")]).possibleAncestors == [rev("2-s"), rev("3-d")])
    }

    // Proves _revisions encode and parse back, stop at a known ancestor, and reject mismatches.
    @Test func revisionsJSON() throws {
        var t = RevTree()
        try t.addHistory([rev("4-d"), rev("3-c"), rev("2-b"), rev("1-a")], deleted: false, body: nil)
        let full = t.revisionsJSON(of: rev("4-d"))
        #expect(full.text == #"{"start":4,"ids":["d","c","b","a"]}"#)
        #expect(try RevTree.parseRevisions(full, rev: rev("4-d")) == t.history(of: rev("4-d")))
        #expect(
            t.revisionsJSON(of: rev("4-d"), knownAncestors: [rev("2-b")]).text == #"{"start":4,"ids":["d","c","b"]}"#)
        #expect(t.revisionsJSON(of: rev("4-d"), limit: 2).text == #"{"start":4,"ids":["d","c"]}"#)
        #expect(throws: RevTreeError.self) { try RevTree.parseRevisions(full, rev: rev("4-x")) }
        #expect(throws: RevTreeError.self) {
            try RevTree.parseRevisions(try JSON.parse(#"{"start":2,"ids":["a","b","c"]}"#), rev: rev("2-a"))
        }
    }

    // Proves the storage form round-trips the tree exactly, bodies and tombstones included, and that
    // corrupt stored trees are refused.
    @Test func storageRoundTrip() throws {
        var t = RevTree()
        try t.add(rev("1-a"), parent: nil, deleted: false, body: body(#"{"v":"one","n":[1,2]}"#))
        try t.add(rev("2-a"), parent: rev("1-a"), deleted: true, body: body("{}"))
        try t.addHistory([rev("3-z"), rev("2-y"), rev("1-a")], deleted: false, body: body(#"{"w":true}"#))
        let back = try RevTree(json: try JSON.parse(t.json().serialized()))
        #expect(back == t)
        #expect(back.winner == rev("3-z") && back.body(of: rev("1-a")) == body(#"{"v":"one","n":[1,2]}"#))
        #expect(throws: RevTreeError.self) {
            try RevTree(json: try JSON.parse(#"{"revs":["1-a","2-b"],"parents":[-1,5]}"#))
        }
        #expect(throws: RevTreeError.self) { try RevTree(json: try JSON.parse(#"{"revs":["bad"],"parents":[-1]}"#)) }
    }
}

@Suite struct DocumentBodyTests {
    // Proves request bodies split into properties and specials, and bad special members are 400s.
    @Test func split() throws {
        let b = try DocumentBody(
            try JSON.parse(
                #"{"_id":"d","_rev":"2-x","a":1,"_deleted":true,"_attachments":{"f":{"stub":true,"digest":"sha1-q"}},"_revisions":{"start":2,"ids":["x","y"]},"z":null}"#
            ))
        #expect(b.id == "d" && b.rev == rev("2-x") && b.deleted)
        #expect(b.properties.text == #"{"a":1,"z":null}"#)
        #expect(b.storedBody["_attachments"]?["f"]?["digest"]?.stringValue == "sha1-q")
        #expect(b.revisions?["start"]?.intValue == 2)
        for bad in [#"{"_foo":1}"#, #"{"_rev":"nope"}"#, "[1]", #"{"_deleted":"yes"}"#, #"{"_id":""}"#] {
            #expect(throws: DocumentError.self) { try DocumentBody(try JSON.parse(bad)) }
        }
    }

    // Proves attachment digests match SHA-1 test vectors and inline data decodes to bytes and metadata.
    @Test func attachments() throws {
        #expect(AttachmentInfo.digest(of: Array("hello".utf8)) == "sha1-qvTGHdzF6KLavt4PO0gs2a6pQ00=")
        let entry = try JSON.parse(#"{"content_type":"text/plain","data":"aGVsbG8="}"#)
        let (info, data) = try #require(try AttachmentInfo.decodeInline(entry, revpos: 3))
        #expect(data == Array("hello".utf8) && info.length == 5 && info.revpos == 3 && info.contentType == "text/plain")
        let back = try AttachmentInfo(json: info.json())
        #expect(back == info)
        #expect(info.json(data: data)["data"]?.stringValue == "aGVsbG8=")
        #expect(throws: DocumentError.self) { try AttachmentInfo(json: try JSON.parse(#"{"stub":true}"#)) }
        #expect(throws: DocumentError.self) {
            try AttachmentInfo.decodeInline(try JSON.parse(#"{"data":"!!!"}"#), revpos: 1)
        }
    }
}
