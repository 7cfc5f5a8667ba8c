//! Text-like fields of the synthetic transactions (see the module docs of
//! [`super`]): merchant descriptor, user agent and e-mail domain, with signal a tree
//! over the numeric features cannot see (the SDK only ever hashes merchants, devices
//! and e-mails into keys).

use super::{Rng, Scenario, MCCS};
use crate::txn::Channel;

/// Text field: the merchant descriptor as printed on a statement.
pub const MERCHANT_DESCRIPTOR: &str = "merchant_descriptor";
/// Text field: the browser's or app's user agent (online channels only).
pub const USER_AGENT: &str = "user_agent";
/// Text field: the domain of the account's e-mail address (online channels only).
pub const EMAIL_DOMAIN: &str = "email_domain";

const PREFIXES: [&str; 6] = ["", "", "SQ *", "TST* ", "PAYPAL *", "SP "];
const CITIES: [(&str, &str); 12] = [
    ("NEW YORK", "NY"),
    ("CHICAGO", "IL"),
    ("AUSTIN", "TX"),
    ("SEATTLE", "WA"),
    ("LONDON", "GB"),
    ("BERLIN", "DE"),
    ("PARIS", "FR"),
    ("MADRID", "ES"),
    ("TORONTO", "ON"),
    ("SYDNEY", "NSW"),
    ("DUBLIN", "IE"),
    ("MIAMI", "FL"),
];
/// Names per MCC index ([`MCCS`] order), combined with a number and a city.
const NAMES: [&[&str]; 14] = [
    &["FRESH MARKET", "CORNER GROCERY", "WHOLE FOODS MKT", "ALDI"],
    &[
        "BLUE BOTTLE COFFEE",
        "NOODLE BAR",
        "TRATTORIA ROMA",
        "THE OLD OAK",
    ],
    &["SHELL OIL", "BP CONNECT", "CHEVRON", "ESSO"],
    &["MACYS", "NORDSTROM", "TARGET", "JOHN LEWIS"],
    &["AMZN Mktp US", "EBAY O*", "ETSY.COM", "WALMART.COM"],
    &["MTA*NYCT PAYGO", "TFL TRAVEL CH", "BVG TICKET", "RATP"],
    &["MCDONALDS", "JOES PIZZA", "TACO SHACK", "SUBWAY"],
    &["BEST BUY", "MEDIA MARKT", "CURRYS", "MICRO CENTER"],
    &["JEWELERS MALL", "TIFFANY", "PANDORA", "KAY JEWELERS"],
    &["DELTA AIR", "UNITED 0162", "RYANAIR", "LUFTHANSA"],
    &["MARRIOTT", "HILTON HOTELS", "AIRBNB * HM", "BOOKING.COM"],
    &["APPLE.COM/BILL", "GOOGLE *Play", "NETFLIX.COM", "SPOTIFY"],
    &[
        "STEAM PURCHASE",
        "XBOX LIVE",
        "PLAYSTATION NETWORK",
        "NINTENDO",
    ],
    &["ATM WITHDRAWAL", "CASH ADV", "ATM CITIBANK", "ATM HSBC"],
];
/// Descriptors of the cash-out merchants fraud rings favour (gift cards, top-ups,
/// crypto, resellable electronics); legitimate cardholders use them too, rarely.
const RISKY: [&str; 10] = [
    "GIFTCARDMALL*CARDS",
    "BTC*XCHANGE TOPUP",
    "PAYPAL *G2A.COM",
    "PREPAID DIGITAL SOLUT",
    "CRYPTO.COM*PURCHASE",
    "SQ *ELECTRONICS RESALE",
    "WU *MONEY TRANSFER",
    "MOBILE RELOAD*VOUCHER",
    "STEAMGAMES GIFT CARD",
    "P2P CASH*SEND",
];
const AGENTS: [&str; 6] = [
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_2 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.2 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.6099.144 Mobile Safari/537.36",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36 Edg/120.0.0.0",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Safari/605.1.15",
    "Mozilla/5.0 (Linux; Android 13; SM-S911B) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/119.0.0.0 Mobile Safari/537.36",
    "ShopApp/5.12.1 (iPhone15,3; iOS 17.1.2; Scale/3.00)",
];
/// Automation, emulators and stale browsers: what scripted fraud looks like.
const BOT_AGENTS: [&str; 6] = [
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/120.0.6099.71 Safari/537.36",
    "python-requests/2.31.0",
    "Mozilla/5.0 (Linux; Android 9; Android SDK built for x86) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/69.0.3497.100 Mobile Safari/537.36",
    "curl/8.4.0",
    "Mozilla/5.0 (Windows NT 6.1; WOW64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/58.0.3029.110 Safari/537.36",
    "okhttp/3.12.1",
];
const DOMAINS: [&str; 9] = [
    "gmail.com",
    "yahoo.com",
    "outlook.com",
    "icloud.com",
    "hotmail.com",
    "web.de",
    "orange.fr",
    "btinternet.com",
    "proton.me",
];
const DISPOSABLE: [&str; 6] = [
    "mailinator.com",
    "guerrillamail.com",
    "10minutemail.com",
    "tempmail.dev",
    "yopmail.com",
    "sharklasers.com",
];

fn mix(a: u64, b: u64) -> u64 {
    crate::hash::splitmix_finalize(a ^ b.wrapping_mul(crate::hash::GOLDEN))
}

/// What one transaction's text fields are drawn from.
pub(super) struct TextInput {
    pub seed: u64,
    pub row: u64,
    pub card: u64,
    pub merchant: u32,
    pub mcc: usize,
    pub channel: Channel,
    pub scenario: Scenario,
    /// The realistic preset's fields ([`realistic_fields`]).
    pub realistic: bool,
}

/// The text fields of one transaction: `(name, value)`; online channels carry all
/// three, card-present ones only the descriptor. Drawn from their own random stream
/// (seeded by the row), so adding them left every other generated value unchanged.
pub(super) fn text_fields(i: &TextInput) -> Vec<(&'static str, String)> {
    let mut rng = Rng::new(mix(i.seed ^ 0x007E_57F1_E1D5, i.row));
    let m = mix(i.merchant as u64, 0x4D45_5243);
    if i.realistic {
        return realistic_fields(i, &mut rng, m);
    }
    let fraud = i.scenario != Scenario::Normal;
    let descriptor = if rng.chance(if fraud { 0.35 } else { 0.006 }) {
        RISKY[rng.below(RISKY.len() as u64) as usize].to_owned()
    } else {
        ordinary_descriptor(i, m)
    };
    let mut out = vec![(MERCHANT_DESCRIPTOR, descriptor)];
    online_fields(i, &mut rng, fraud, fraud, &mut out);
    out
}

/// An ordinary merchant's descriptor: prefix, a name typical of its category, store
/// number, city (all fixed by the merchant's hash `m`).
fn ordinary_descriptor(i: &TextInput, m: u64) -> String {
    let names = NAMES[i.mcc.min(MCCS.len() - 1)];
    let (city, st) = CITIES[(m >> 8) as usize % CITIES.len()];
    format!(
        "{}{} {:04} {} {}",
        PREFIXES[(m >> 16) as usize % PREFIXES.len()],
        names[(m >> 24) as usize % names.len()],
        i.merchant % 10_000,
        city,
        st
    )
}

/// User agent and e-mail domain of online channels: automation / stale agents and
/// disposable domains with probability 0.4 where `bot` (0.01 / 0.015 otherwise).
fn online_fields(
    i: &TextInput,
    rng: &mut Rng,
    bot_agent: bool,
    disposable: bool,
    out: &mut Vec<(&'static str, String)>,
) {
    if matches!(i.channel, Channel::Ecom | Channel::App) {
        let c = mix(i.card, 0x5541);
        let agent = if rng.chance(if bot_agent { 0.4 } else { 0.01 }) {
            BOT_AGENTS[rng.below(BOT_AGENTS.len() as u64) as usize]
        } else {
            AGENTS[(c >> 8) as usize % AGENTS.len()]
        };
        let domain = if rng.chance(if disposable { 0.4 } else { 0.015 }) {
            DISPOSABLE[rng.below(DISPOSABLE.len() as u64) as usize]
        } else {
            DOMAINS[(c >> 20) as usize % DOMAINS.len()]
        };
        out.push((USER_AGENT, agent.to_owned()));
        out.push((EMAIL_DOMAIN, domain.to_owned()));
    }
}

/// Descriptors of cash-out merchants in the realistic preset: gift cards, prepaid
/// reloads, crypto on-ramps, remittance and resale, in words that mostly share nothing
/// with each other. Their meaning carries the signal; legitimate cardholders buy there
/// too (more in the gift-card season).
const CASH_OUT: [&str; 16] = [
    "GIFTCARDMALL*CARDS",
    "RAISE.COM MARKETPLACE",
    "CARDCASH EXCHANGE",
    "BTC*XCHANGE TOPUP",
    "COINFLIP*BITCOIN",
    "MOONPAY *ONRAMP",
    "PAXFUL*PURCHASE",
    "NETSPEND RELOAD",
    "GREEN DOT*RELOADIT",
    "VANILLA PREPAID ONLINE",
    "MOBILE RELOAD*VOUCHER",
    "REMITLY*SEND",
    "WU *MONEY TRANSFER",
    "SQ *ELECTRONICS RESALE",
    "GAMEFLIP*MARKET",
    "G2A.COM KEYS",
];
/// Peer-to-peer transfer services (the realistic preset's beneficiaries).
const P2P: [&str; 5] = [
    "ZELLE TO",
    "VENMO *",
    "CASH APP*",
    "PAYPAL *P2P",
    "REVOLUT*TO",
];
const PAYEES: [&str; 12] = [
    "J SMITH",
    "M GARCIA",
    "A KOWALSKI",
    "L CHEN",
    "R PATEL",
    "S MUELLER",
    "K OKAFOR",
    "D IVANOV",
    "P ROSSI",
    "T NGUYEN",
    "E DUBOIS",
    "H TANAKA",
];

/// The realistic preset's text: cash-out and transfer merchants by their terminal
/// range (the signal lives in what the descriptor means, not in the scenario), bots
/// and disposable e-mail mostly in scripted attacks (card testing, enumeration).
fn realistic_fields(i: &TextInput, rng: &mut Rng, m: u64) -> Vec<(&'static str, String)> {
    use super::realistic::{is_cash_out, is_p2p};
    let descriptor = if is_cash_out(i.merchant) {
        CASH_OUT[(m >> 12) as usize % CASH_OUT.len()].to_owned()
    } else if is_p2p(i.merchant) {
        format!(
            "{} {}",
            P2P[(m >> 8) as usize % P2P.len()],
            PAYEES[(m >> 20) as usize % PAYEES.len()]
        )
    } else {
        ordinary_descriptor(i, m)
    };
    let mut out = vec![(MERCHANT_DESCRIPTOR, descriptor)];
    let scripted = matches!(i.scenario, Scenario::CardTesting | Scenario::AppEnumeration);
    online_fields(i, rng, scripted, scripted, &mut out);
    out
}
