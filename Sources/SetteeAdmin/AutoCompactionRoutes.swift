import Hummingbird
import Logging
import SetteeCore
import SetteeJSON
import SetteeRegistry

/// The cluster's auto-compaction settings (ADR 0159), as Couchbase's REST API has them:
///
/// - `GET /settings/autoCompaction`: `{"autoCompactionSettings":{"databaseFragmentationThreshold":{"percentage":P,
///   "size":S},"viewFragmentationThreshold":{"percentage":P,"size":S},"parallelDBAndViewCompaction":B},
///   "purgeInterval":D}`, a threshold off as `"undefined"`, sizes in bytes; `purgeInterval` is the days a bucket
///   without its own keeps tombstones (`Limits.defaultPurgeIntervalDays`).
/// - `POST /controller/setAutoCompaction`: the same fields as a form (`databaseFragmentationThreshold[percentage]`,
///   `[size]`, `viewFragmentationThreshold[percentage]`, `[size]`, `parallelDBAndViewCompaction`), each optional, a
///   threshold turned off with `undefined`; 400 with `{"errors":{field: message}}` for a value out of range, for
///   `allowedTimePeriod[…]` (compaction here runs at any time, in steps that leave the disk to writes) and for
///   `purgeInterval` (set per bucket here: `POST /pools/default/buckets/NAME` with `purgeInterval`). The settings
///   live in the cluster document; every node's checks read them (`AutoCompactionChecks`).
enum AutoCompactionRoutes {
    static func add(to router: Router<AdminRequestContext>, api: AdminAPI) {
        router.get("/settings/autoCompaction") { _, _ in
            AdminResponses.json(.ok, settingsJSON(api.registry.autoCompaction))
        }
        router.post("/controller/setAutoCompaction") { request, _ in await post(request, api: api) }
    }

    static func settingsJSON(_ s: AutoCompaction.Settings) -> JSON {
        func value(_ v: Int?) -> JSON { v.map { .int($0) } ?? .string("undefined") }
        return [
            "autoCompactionSettings": [
                "databaseFragmentationThreshold": [
                    "percentage": value(s.databasePercentage), "size": value(s.databaseSize),
                ],
                "viewFragmentationThreshold": ["percentage": value(s.viewPercentage), "size": value(s.viewSize)],
                "parallelDBAndViewCompaction": .bool(s.parallelDBAndViewCompaction),
            ],
            "purgeInterval": .number(Limits.defaultPurgeIntervalDays),
        ]
    }

    /// The settings `form` makes of `old`, or the fields it got wrong.
    static func apply(_ form: FormBody, to old: AutoCompaction.Settings) -> Result<
        AutoCompaction.Settings, FieldErrors
    > {
        var new = old
        var errors: [(String, String)] = []
        func threshold(_ field: String, _ slot: WritableKeyPath<AutoCompaction.Settings, Int?>) {
            guard let v = form[field] else { return }
            if v == "undefined" {
                new[keyPath: slot] = nil
            } else if let n = Int(v) {
                new[keyPath: slot] = n
            } else {
                errors.append((field, "The value must be an integer or undefined"))
            }
        }
        threshold("databaseFragmentationThreshold[percentage]", \.databasePercentage)
        threshold("databaseFragmentationThreshold[size]", \.databaseSize)
        threshold("viewFragmentationThreshold[percentage]", \.viewPercentage)
        threshold("viewFragmentationThreshold[size]", \.viewSize)
        if let v = form["parallelDBAndViewCompaction"] {
            switch v {
            case "true": new.parallelDBAndViewCompaction = true
            case "false": new.parallelDBAndViewCompaction = false
            default:
                errors.append(("parallelDBAndViewCompaction", "The value must be one of the following: [true,false]"))
            }
        }
        for key in form.fields.keys.sorted() where key.hasPrefix("allowedTimePeriod") {
            errors.append((key, "Not supported: compaction runs at any time, a step at a time between writes"))
        }
        if form["purgeInterval"] != nil {
            errors.append(
                ("purgeInterval", "Set per bucket: POST /pools/default/buckets/NAME with purgeInterval (days)"))
        }
        for (field, message) in new.errors where !errors.contains(where: { $0.0 == field }) {
            errors.append((field, message))
        }
        return errors.isEmpty ? .success(new) : .failure(FieldErrors(errors: errors))
    }

    struct FieldErrors: Error {
        var errors: [(String, String)]
    }

    static func post(_ request: Request, api: AdminAPI) async -> Response {
        if let forwarded = await api.forwardToOrchestrator(request) { return forwarded }
        let form: FormBody
        switch await api.form(request) {
        case .success(let f): form = f
        case .failure(let e): return e.response
        }
        let settings: AutoCompaction.Settings
        switch apply(form, to: api.registry.autoCompaction) {
        case .success(let s): settings = s
        case .failure(let e): return AdminResponses.fieldErrors(e.errors)
        }
        let registry = api.registry
        do {
            try await api.configChange { claim in try registry.updateAutoCompaction(settings, claim: claim) }
        } catch let refused as ClusterRequestError {
            return AdminAPI.refusal(refused)
        } catch {
            api.logger.error("saving the auto-compaction settings failed", metadata: ["error": "\(error)"])
            return AdminResponses.general(.internalServerError, "Could not save the auto-compaction settings.")
        }
        await api.publish()
        return AdminResponses.empty(.ok)
    }
}
