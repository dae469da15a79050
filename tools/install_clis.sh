#!/bin/sh
# Install the pinned real agent CLIs (Claude Code, Codex, aider) into one cache folder, outside the repository.
#
# usage: tools/install_clis.sh CACHE PYTHON CLAUDE_CODE_VERSION CODEX_VERSION AIDER_VERSION
#
# The npm packages go to CACHE/npm (npm install --prefix), aider-chat into its own virtual
# environment CACHE/aider, made with PYTHON. A CLI already there at its pinned version is left
# alone, so a second run takes well under a second. A CLI that cannot be installed is one line;
# when CI is set that fails the run (exit 1), otherwise its tests skip, saying so.
set -u
cache=$1 python=$2 claude_version=$3 codex_version=$4 aider_version=$5
failed=""
mkdir -p "$cache/npm" || exit 1

has_npm_version() {  # package, version: is it installed in the cache at that version?
	grep -q "\"version\": \"$2\"" "$cache/npm/node_modules/$1/package.json" 2>/dev/null
}

want=""
has_npm_version @anthropic-ai/claude-code "$claude_version" || want="$want @anthropic-ai/claude-code@$claude_version"
has_npm_version @openai/codex "$codex_version" || want="$want @openai/codex@$codex_version"
if [ -n "$want" ]; then
	if ! command -v npm >/dev/null 2>&1; then
		echo "clis: npm is missing, so$want cannot be installed; the real claude-code and codex tests will skip"
		failed="$failed$want"
	elif ! npm install --prefix "$cache/npm" --no-audit --no-fund --loglevel=error $want >/dev/null; then
		echo "clis: npm could not install$want into $cache/npm"
		failed="$failed$want"
	fi
fi

if ! ls -d "$cache"/aider/lib/python*/site-packages/aider_chat-"$aider_version".dist-info >/dev/null 2>&1; then
	log="$cache/aider-install.log"
	if ! { "$python" -m venv "$cache/aider" && "$cache/aider/bin/python" -m pip install -q --disable-pip-version-check \
		"aider-chat==$aider_version" >"$log" 2>&1; }; then
		echo "clis: aider-chat $aider_version could not be installed into $cache/aider; pip said:"
		grep -v '^WARNING: Location' "$log" 2>/dev/null | tail -5
		failed="$failed aider-chat==$aider_version"
	fi
fi

if [ -n "$failed" ]; then
	if [ -n "${CI:-}" ]; then
		echo "clis: CI is set and$failed could not be installed: the real-agent tests need them"
		exit 1
	fi
	echo "clis: without$failed the real-agent tests that need them skip"
fi
exit 0
