import SetteeCore
import SetteeJSON
import Testing

@testable import SetteeAdmin

/// ADR 0159: `/controller/setAutoCompaction`'s form against the settings it makes, and `/settings/autoCompaction`'s
/// shape (Couchbase's: a threshold that is off reads `"undefined"`).
struct AutoCompactionRoutesTests {
    static func form(_ pairs: [(String, String)]) -> FormBody {
        FormBody(fields: Dictionary(pairs, uniquingKeysWith: { _, b in b }))
    }

    @Test func aFormChangesOnlyTheFieldsItNames() throws {
        let old = AutoCompaction.Settings()
        let new = try AutoCompactionRoutes.apply(
            Self.form([
                ("databaseFragmentationThreshold[percentage]", "undefined"),
                ("databaseFragmentationThreshold[size]", "1048576"), ("parallelDBAndViewCompaction", "true"),
            ]), to: old
        ).get()
        #expect(new.databasePercentage == nil && new.databaseSize == 1_048_576 && new.parallelDBAndViewCompaction)
        #expect(new.viewPercentage == 30 && new.viewSize == nil)
        let json = AutoCompactionRoutes.settingsJSON(new)
        let settings = json["autoCompactionSettings"]
        #expect(settings?["databaseFragmentationThreshold"]?["percentage"] == .string("undefined"))
        #expect(settings?["databaseFragmentationThreshold"]?["size"] == .int(1_048_576))
        #expect(settings?["viewFragmentationThreshold"]?["percentage"] == .int(30))
        #expect(settings?["parallelDBAndViewCompaction"] == .bool(true))
        #expect(json["purgeInterval"] == .number(Limits.defaultPurgeIntervalDays))
    }

    @Test func badValuesAreFieldErrorsAndChangeNothing() {
        for (field, value) in [
            ("databaseFragmentationThreshold[percentage]", "1"), ("viewFragmentationThreshold[percentage]", "101"),
            ("databaseFragmentationThreshold[size]", "0"), ("viewFragmentationThreshold[size]", "-1"),
            ("databaseFragmentationThreshold[percentage]", "30%"), ("parallelDBAndViewCompaction", "1"),
            ("allowedTimePeriod[abortOutside]", "true"), ("purgeInterval", "3"),
        ] {
            switch AutoCompactionRoutes.apply(Self.form([(field, value)]), to: AutoCompaction.Settings()) {
            case .success(let s): Issue.record("\(field)=\(value) accepted: \(s)")
            case .failure(let e): #expect(e.errors.map(\.0) == [field], "\(field)=\(value): \(e.errors)")
            }
        }
    }
}
