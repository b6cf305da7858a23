import SetteeCore
import SetteeJSON
import Testing

/// The document depth bound's pieces: `nestingDepth`, and `JSON.parse(_:elementsOf:…)` bounding each element alone.
@Suite struct JSONDocumentDepthTests {
    static func nested(_ depth: Int) -> String {
        String(repeating: "[", count: depth) + "1" + String(repeating: "]", count: depth)
    }

    // Proves `nestingDepth` counts the value itself, and measures a value far deeper than any thread's stack could
    // recurse through (it walks a heap stack).
    @Test func nestingDepthCountsTheValueItself() throws {
        #expect(JSON.integer(1).nestingDepth == 0)
        #expect(try JSON.parse("{}").nestingDepth == 1)
        #expect(try JSON.parse(#"{"a":[1],"b":{"c":{"d":[]}}}"#).nestingDepth == 4)
        #expect(try JSON.parse(Self.nested(1_000), maxDepth: 1_000).nestingDepth == 1_000)
        var deep = JSON.array([])
        for _ in 0..<99_999 { deep = .array([deep]) }
        let measured = deep.nestingDepth
        #expect(measured == 100_000)
        // Freed level by level without recursing through 100,000 nested arrays.
        while case .array(let items) = deep, let inner = items.first { deep = inner }
    }

    // Proves the bound is on each element, not on the text around it: an element exactly `maxElementDepth` deep is a
    // value (two levels below the text's top), one level deeper or 100,000 deeper is `.tooDeep` with its shallow
    // members kept (its `_id`), the elements after it are read on, and the other members are the object's.
    @Test func elementsAreBoundedOneByOne() throws {
        let d = 5
        let text =
            #"{"new_edits":false,"docs":[{"_id":"ok","v":"# + Self.nested(d - 1) + #"},{"_id":"deep","v":"#
            + Self.nested(d) + #","after":1},{"_id":"hostile","v":"# + Self.nested(100_000)
            + #"},{"_id":"flat"}],"x":[[1]]}"#
        let (object, elements) = try JSON.parse(Array(text.utf8), elementsOf: "docs", maxElementDepth: d)
        #expect(object["new_edits"] == false && object["docs"] == [] && object["x"] == [[1]])
        #expect(elements.count == 4)
        guard elements.count == 4 else { return }
        #expect(elements[0] == .value(try JSON.parse(#"{"_id":"ok","v":"# + Self.nested(d - 1) + "}")))
        guard case .tooDeep(let deep) = elements[1], case .tooDeep(let hostile) = elements[2] else {
            Issue.record("\(elements[1]) \(elements[2])")
            return
        }
        #expect(deep["_id"] == "deep" && deep["after"] == 1)
        #expect(hostile["_id"] == "hostile")
        #expect(elements[3] == .value(["_id": "flat"]))
    }

    // Proves a number past a double's range fails only its own element (`.outOfRange`, the number read as null and
    // the element's other members kept), while the same number anywhere else still fails the whole text.
    @Test func anOutOfRangeNumberFailsOnlyItsElement() throws {
        let text = #"{"docs":[{"_id":"a","n":1e400,"m":2},{"_id":"b","n":1e300}]}"#
        let (_, elements) = try JSON.parse(Array(text.utf8), elementsOf: "docs", maxElementDepth: 10)
        #expect(elements == [.outOfRange(["_id": "a", "n": nil, "m": 2]), .value(["_id": "b", "n": 1e300])])
        #expect(throws: JSONError.self) { try JSON.parse(#"{"n":-1e400}"#) }
        #expect(throws: JSONError.self) {
            try JSON.parse(Array(#"{"docs":[],"n":1e400}"#.utf8), elementsOf: "docs", maxElementDepth: 10)
        }
    }

    // Proves a skipped element must still balance its brackets and close its strings, and the whole text's value
    // bound still holds across elements.
    @Test func skippedElementsAreCheckedAndValuesCounted() throws {
        for bad in [#"{"docs":[[[[[1]]]]}]}"#, #"{"docs":[[[[["]]]]]]}"#, #"{"docs":[[[[[[1]]]]]"#] {
            #expect(throws: JSONError.self, "\(bad)") {
                try JSON.parse(Array(bad.utf8), elementsOf: "docs", maxElementDepth: 3)
            }
        }
        let skipped = #"{"docs":[[[[["a\"]",{"b":"\\"}]]]]]}"#
        let (_, elements) = try JSON.parse(Array(skipped.utf8), elementsOf: "docs", maxElementDepth: 3)
        #expect(elements == [.tooDeep([[[.null]]])])
        #expect(throws: JSONError.self) {
            try JSON.parse(Array(#"{"docs":[[1,2],[3,4]]}"#.utf8), elementsOf: "docs", maxElementDepth: 3, maxValues: 7)
        }
        let notAnObject = try JSON.parse(Array(#"[1]"#.utf8), elementsOf: "docs", maxElementDepth: 3)
        #expect(notAnObject.object == [1] && notAnObject.elements.isEmpty)
    }
}
